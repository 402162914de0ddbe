"""Fuzzing the poison-pill triage with what a payload's ``crash_count`` may hold.

The master runs the triage on every job of a child that died, in its own
loop: a payload whose ``crash_count`` is not a number (any producer can write
one) must not raise there, since an exception in that loop ends the master
and with it every child.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from jobmaster.poison import crash_triage
from tests.fuzzing import json_values

MAX_CRASHES = 3


@pytest.mark.timeout(30)
@settings(max_examples=200, deadline=None, database=None)
@given(crash_count=json_values, crash_queue=st.sampled_from(["", "big"]))
@example(crash_count="many", crash_queue="")
@example(crash_count=[1], crash_queue="")
@example(crash_count={"n": 1}, crash_queue="big")
@example(crash_count=10**400, crash_queue="")
def test_any_crash_count_is_triaged_never_raised(crash_count: Any, crash_queue: str) -> None:
    triage = crash_triage(MAX_CRASHES, crash_queue, "SIGKILL")
    payload, reason = triage(
        b"", {"jid": "j", "job": "x", "queue": "default", "crash_count": crash_count}
    )
    assert isinstance(payload["crash_count"], int)
    assert reason is None or "SIGKILL" in reason
    if crash_count is None or isinstance(crash_count, list | dict):
        # Not a count: taken as none, so this death is the first.
        assert payload["crash_count"] == 1
        assert reason is None
