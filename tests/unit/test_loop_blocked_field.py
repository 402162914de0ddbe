"""A heartbeat's ``loop_blocked`` field (api/processes.py) as ``jobmaster ps``
and the Busy page read it: anyone may write it (SPEC 8), and no forged value
makes them fail."""

from __future__ import annotations

import json

import pytest

from jobmaster.api.processes import BLOCKED_FIELD, Process


def process(loop_blocked: str) -> Process:
    return Process.from_heartbeat("host:7:w", {"pid": "7", "loop_blocked": loop_blocked})


def test_what_a_worker_writes_is_read() -> None:
    blocked = {"jid": "j1", "job": "app.jobs.sleepy", "since": 1700000000.5}
    assert process(json.dumps(blocked)).loop_blocked == blocked


@pytest.mark.parametrize("opening", ["[", '{"a":'])
def test_json_nested_deeper_than_python_recurses_reads_as_none(opening: str) -> None:
    """Within the field's bound, ``[[[[...`` made json.loads raise
    RecursionError, which is no ValueError: ``ps`` and the Busy page failed."""
    forged = opening * (BLOCKED_FIELD // len(opening))
    assert len(forged) <= BLOCKED_FIELD
    assert process(forged).loop_blocked is None
