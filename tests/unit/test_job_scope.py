"""The executor's ``Scope`` (worker/executor.py): what a job's code runs inside,
entered and left as the four nested ``with`` blocks it replaces."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import jobmaster
from jobmaster import payload as wire
from jobmaster.errors import JobCancelled
from jobmaster.keys import Keys
from jobmaster.worker.cancels import CancelWatch
from jobmaster.worker.executor import Scope
from jobmaster.worker.fetched import FetchedJob
from jobmaster.worker.unit import Unit
from jobmaster.worker.watchdog import Watchdog


@jobmaster.job(name="tests.unit.scope_job", timeout=30)
def scoped() -> None:
    pass


def read(**fields: Any) -> FetchedJob:
    payload = {"jid": "j" * 24, "job": "tests.unit.scope_job", "args": [], "queue": "low"}
    return FetchedJob.read(Unit(wire.encode({**payload, **fields}), "low"))


def watches() -> tuple[Watchdog, CancelWatch]:
    stop = threading.Event()
    return Watchdog(1.0, lambda armed: None, stop), CancelWatch(None, Keys("t"), stop)  # type: ignore[arg-type]


def test_inside_the_job_is_current_its_batch_too_and_both_are_gone_after() -> None:
    watchdog, cancels = watches()
    with Scope(read(batch="b1"), watchdog, cancels):
        info = jobmaster.current_job()
        assert info is not None
        assert (info.jid, info.queue, info.batch_id) == ("j" * 24, "low", "b1")
        assert jobmaster.current_job() is info  # made once, the same for the whole job
        batch = jobmaster.current_batch()
        assert batch is not None and batch.bid == "b1"
        assert watchdog._armed and cancels._running  # its timeout and cancel watched
    assert jobmaster.current_job() is None
    assert jobmaster.current_batch() is None
    assert not watchdog._armed and not cancels._running


def test_a_job_that_raises_leaves_everything() -> None:
    watchdog, cancels = watches()
    with pytest.raises(RuntimeError), Scope(read(batch="b1"), watchdog, cancels):
        raise RuntimeError("boom")
    assert jobmaster.current_job() is None and jobmaster.current_batch() is None
    assert not watchdog._armed and not cancels._running


def test_a_cancel_read_before_the_start_enters_nothing() -> None:
    watchdog, cancels = watches()
    cancels._requested["j" * 24] = 1.0
    with pytest.raises(JobCancelled), Scope(read(), watchdog, cancels):
        pytest.fail("the job's code ran")
    assert jobmaster.current_job() is None
    assert not watchdog._armed and not cancels._running
