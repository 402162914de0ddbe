"""A job's end line says its duration once: the message and the
``duration_ms`` field come from one rounded value, so a log shipper's field
and the human-readable text never disagree (they did at a rounding boundary:
"done in 202.1 ms" beside duration_ms 202.15, which reads as 202.2)."""

from __future__ import annotations

import logging

import pytest

from jobmaster.worker import executor
from jobmaster.worker.fetched import FetchedJob
from jobmaster.worker.outcome import Ran, conclude
from jobmaster.worker.unit import Unit

RAW = b'{"jid": "j", "job": "tests.nothing", "args": [], "queue": "default"}'


@pytest.mark.parametrize("seconds", [0.20214999, 0.00004999, 1.23456789, 0.1005])
def test_the_done_line_s_message_and_field_agree(
    seconds: float, caplog: pytest.LogCaptureFixture
) -> None:
    job = FetchedJob.read(Unit(raw=RAW, queue="default"))
    ending = Ran(value=None)
    outcome = conclude(job, ending, 0.0, seconds)
    with caplog.at_level(logging.INFO, logger="jobmaster.worker.executor"):
        executor._log_end(outcome, ending, job, seconds)
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "job.done"]
    shown = record.getMessage()
    assert shown == f"done in {record.duration_ms:.1f} ms"
