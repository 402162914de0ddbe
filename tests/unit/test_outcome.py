"""Backoff and the pure outcome decisions: retry, dead or dropped, without Redis."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

import jobmaster
from jobmaster import payload as wire
from jobmaster.backoff import DEFAULT_RETRY, default_backoff, retry_delay
from jobmaster.worker.outcome import (
    MAX_BACKTRACE_LINES,
    bad_payload,
    decide_failure,
    error_fields,
    succeeded,
)

NOW = 1_700_000_000.0


def payload(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "jid": "0123456789abcdef01234567",
        "job": "app.jobs.charge",
        "args": [42],
        "kwargs": {},
        "queue": "default",
    }
    base.update(fields)
    return base


def raised(error: BaseException) -> BaseException:
    """The error with a real traceback, as a job would have raised it."""
    try:
        raise error
    except BaseException as caught:
        return caught


def bounds(count: int) -> tuple[float, float]:
    return count**4 + 15, count**4 + 15 + 10 * (count + 1)


# -- backoff ------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 5, 10, 25])
def test_default_backoff_within_bounds(count: int) -> None:
    low, high = bounds(count)
    delays = [default_backoff(count) for _ in range(500)]
    assert all(low <= delay <= high for delay in delays)
    assert all(isinstance(delay, float) for delay in delays)
    # Jitter: jobs that failed together must not all come back together.
    assert len(set(delays)) > 100


def test_retry_delay_with_number() -> None:
    assert retry_delay(1, 30) == 30.0
    assert retry_delay(7, 2.5) == 2.5
    assert retry_delay(3, 0) == 0.0
    assert retry_delay(3, -5) == 0.0


def test_retry_delay_with_callable_gets_count() -> None:
    seen: list[int] = []

    def backoff(count: int) -> float:
        seen.append(count)
        return count * 10

    assert retry_delay(4, backoff) == 40.0
    assert seen == [4]
    assert retry_delay(1, lambda count: -3) == 0.0


@pytest.mark.parametrize("count", [1, 3])
def test_retry_delay_none_uses_default(count: int) -> None:
    low, high = bounds(count)
    for _ in range(100):
        assert low <= retry_delay(count, None) <= high


# -- decide_failure -------------------------------------------------------------


def test_first_failure_is_retried() -> None:
    job = payload(retry=25)
    error = raised(RuntimeError("card declined"))
    outcome = decide_failure(job, error, None, NOW)
    assert outcome.kind == "retry"
    assert outcome.failed
    assert outcome.jid == job["jid"]
    assert outcome.job == "app.jobs.charge"
    low, high = bounds(1)
    assert NOW + low <= outcome.score <= NOW + high
    stored = outcome.stored
    assert stored is not None
    assert stored["retry_count"] == 1
    assert stored["failed_at"] == NOW
    assert stored["error_class"] == "RuntimeError"
    assert stored["error_message"] == "card declined"
    backtrace = stored["error_backtrace"]
    assert isinstance(backtrace, list)
    assert all(isinstance(line, str) for line in backtrace)
    assert backtrace[-1] == "RuntimeError: card declined"
    assert any("raised" in line for line in backtrace)  # the frame that raised
    for key in ("jid", "job", "args", "kwargs", "queue", "retry"):
        assert stored[key] == job[key]
    assert "dead_reason" not in stored
    assert "retry_count" not in job, "the input payload must not be modified"
    json.loads(wire.encode(stored))


def test_retry_score_is_now_plus_numeric_backoff() -> None:
    outcome = decide_failure(payload(retry=5, retry_count=2), RuntimeError("x"), 60, NOW)
    assert outcome.kind == "retry"
    assert outcome.score == NOW + 60
    assert outcome.stored is not None
    assert outcome.stored["retry_count"] == 3


def test_retries_exhausted_is_dead() -> None:
    second = decide_failure(payload(retry=2, retry_count=1), ValueError("bad"), 1, NOW)
    assert second.kind == "retry"
    third = decide_failure(payload(retry=2, retry_count=2), ValueError("bad"), 1, NOW)
    assert third.kind == "dead"
    assert third.failed
    assert third.score == NOW
    assert "exhausted" in third.reason
    assert "(2)" in third.reason
    assert "ValueError: bad" in third.reason
    assert third.stored is not None
    assert third.stored["retry_count"] == 3
    assert third.stored["dead_reason"] == third.reason
    assert third.stored["died_at"] == NOW
    assert third.stored["error_class"] == "ValueError"


def test_retry_zero_is_dead_at_once() -> None:
    outcome = decide_failure(payload(retry=0), RuntimeError("x"), None, NOW)
    assert outcome.kind == "dead"
    assert "exhausted" in outcome.reason
    assert outcome.stored is not None
    assert outcome.stored["retry_count"] == 1


def test_retry_false_is_dropped() -> None:
    outcome = decide_failure(payload(retry=False), RuntimeError("x"), None, NOW)
    assert outcome.kind == "dropped"
    assert outcome.failed
    assert outcome.stored is None
    assert outcome.jid == payload()["jid"]


def test_retry_true_means_default_retry() -> None:
    last = decide_failure(
        payload(retry=True, retry_count=DEFAULT_RETRY - 1), RuntimeError("x"), 1, NOW
    )
    assert last.kind == "retry"
    over = decide_failure(payload(retry=True, retry_count=DEFAULT_RETRY), RuntimeError("x"), 1, NOW)
    assert over.kind == "dead"
    assert f"({DEFAULT_RETRY})" in over.reason


def test_permanent_is_dead_with_retries_left() -> None:
    error = raised(jobmaster.Permanent("account closed"))
    outcome = decide_failure(payload(retry=25), error, None, NOW)
    assert outcome.kind == "dead"
    assert "permanent" in outcome.reason
    assert "account closed" in outcome.reason
    assert outcome.stored is not None
    assert outcome.stored["error_class"] == "Permanent"
    assert outcome.stored["dead_reason"] == outcome.reason


def test_permanent_subclass_is_dead() -> None:
    class Gone(jobmaster.Permanent):
        pass

    outcome = decide_failure(payload(retry=25), Gone("deleted"), None, NOW)
    assert outcome.kind == "dead"
    assert outcome.stored is not None
    assert outcome.stored["error_class"] == "Gone"


def test_payload_without_retry_uses_default_retry_argument() -> None:
    job = payload()
    assert "retry" not in job
    assert decide_failure(job, RuntimeError("x"), 1, NOW, default_retry=0).kind == "dead"
    assert decide_failure(job, RuntimeError("x"), 1, NOW, default_retry=False).kind == "dropped"
    assert decide_failure(job, RuntimeError("x"), 1, NOW, default_retry=3).kind == "retry"
    exhausted = decide_failure(payload(retry_count=3), RuntimeError("x"), 1, NOW, default_retry=3)
    assert exhausted.kind == "dead"


def test_payload_retry_wins_over_default_retry_argument() -> None:
    outcome = decide_failure(payload(retry=0), RuntimeError("x"), 1, NOW, default_retry=25)
    assert outcome.kind == "dead"


def test_payload_numeric_backoff_wins_over_registered_backoff() -> None:
    def registered(count: int) -> float:
        raise AssertionError("the payload's backoff should have been used")

    outcome = decide_failure(payload(retry=5, backoff=7), RuntimeError("x"), registered, NOW)
    assert outcome.score == NOW + 7
    outcome = decide_failure(payload(retry=5, backoff=2.5), RuntimeError("x"), 1000, NOW)
    assert outcome.score == NOW + 2.5


def test_callable_backoff_gets_failure_count() -> None:
    seen: list[int] = []

    def backoff(count: int) -> float:
        seen.append(count)
        return 100.0 * count

    outcome = decide_failure(payload(retry=10, retry_count=3), RuntimeError("x"), backoff, NOW)
    assert seen == [4]
    assert outcome.score == NOW + 400


# -- error_fields, succeeded, bad_payload -----------------------------------------


def test_error_fields_bounds_backtrace_and_message() -> None:
    # A message of many long lines makes the formatted backtrace long in both ways.
    message = "\n".join(f"line {index} " + "x" * 50 for index in range(100))
    fields = error_fields(raised(RuntimeError(message)))
    assert fields["error_class"] == "RuntimeError"
    assert fields["error_message"] == message[:2000]
    backtrace = fields["error_backtrace"]
    assert len(backtrace) == MAX_BACKTRACE_LINES
    assert all(isinstance(line, str) and "\n" not in line for line in backtrace)
    assert backtrace[-1] == "line 99 " + "x" * 50  # the last lines are the ones kept


def test_error_fields_of_error_never_raised() -> None:
    fields = error_fields(ValueError("plain"))
    assert fields == {
        "error_class": "ValueError",
        "error_message": "plain",
        "error_backtrace": ["ValueError: plain"],
    }


def test_succeeded() -> None:
    outcome = succeeded(payload())
    assert (outcome.kind, outcome.jid, outcome.job) == ("done", payload()["jid"], "app.jobs.charge")
    assert not outcome.failed
    assert outcome.stored is None


def test_bad_payload_is_dead_with_reason() -> None:
    outcome = bad_payload(b"not json", "payload is not JSON: x", "mail")
    assert outcome.kind == "dead"
    assert outcome.failed
    assert outcome.reason == "payload is not JSON: x"
    assert outcome.job == "None"
    assert re.fullmatch(r"[0-9a-f]{24}", outcome.jid)
    assert outcome.stored is not None
    assert outcome.stored["jid"] == outcome.jid
    assert outcome.stored["raw"] == "not json"
    assert outcome.stored["queue"] == "mail"
    assert outcome.score == outcome.stored["died_at"]


def test_bad_payload_of_object_keeps_its_jid_and_job() -> None:
    data = json.dumps(payload(job="not.registered")).encode()
    outcome = bad_payload(data, "no job registered as 'not.registered'", "default")
    assert outcome.jid == payload()["jid"]
    assert outcome.job == "not.registered"
    assert outcome.stored is not None
    assert outcome.stored["args"] == [42]


def test_failure_of_decoded_payload_is_always_storable() -> None:
    try:
        job = wire.decode(b'{"jid":"a","job":"j","args":[NaN],"queue":"q"}')
    except wire.BadPayload:
        return  # refused on arrival: as good as a storable outcome
    outcome = decide_failure(job, RuntimeError("x"), 1, NOW)
    assert outcome.stored is not None
    wire.encode(outcome.stored)
