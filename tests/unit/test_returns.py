"""What a worker stores of a job's return value, and for how long (worker/returns.py)."""

from __future__ import annotations

import datetime
import json
import logging
import math
from typing import Any

import pytest

import jobmaster
from jobmaster import payload as wire
from jobmaster.keys import Keys
from jobmaster.worker import returns
from jobmaster.worker.core import IOCore
from jobmaster.worker.executor import Executor
from jobmaster.worker.fetched import FetchedJob
from jobmaster.worker.outcome import Kind, Ran, conclude
from jobmaster.worker.unit import Unit


@pytest.mark.parametrize(
    "value", [0, "", False, [], {}, 1.5, "naïve ✓", {"a": [1, None, True]}, (1, 2), 2**70]
)
def test_json_values_are_kept_as_compact_json(value: Any) -> None:
    encoded = returns.encode(value, "j" * 24, "tests.x")
    assert encoded is not None
    assert json.loads(encoded) == (list(value) if isinstance(value, tuple) else value)
    assert b", " not in encoded and b": " not in encoded


def test_none_stores_nothing() -> None:
    assert returns.encode(None, "j" * 24, "tests.x") is None


def deep() -> list[Any]:
    value: list[Any] = []
    for _ in range(100_000):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (datetime.date(2026, 1, 1), "its return value is a date"),
        ({1: "a"}, "non-string key 1"),
        ([math.nan], "its return value[0] is nan"),
        ({"s": {1, 2}}, "its return value['s'] is a set"),
        (deep(), "nested too deeply"),
    ],
)
def test_what_json_cannot_encode_is_dropped_with_a_log_line(
    value: Any, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="jobmaster.worker.returns"):
        assert returns.encode(value, "a" * 24, "tests.returns") is None
    [line] = caplog.records
    assert line.getMessage().startswith(
        f"result of jid={'a' * 24} job=tests.returns not kept, the job is complete with result None"
    )
    assert why in line.getMessage()
    assert line.__dict__["event"] == "job.result_dropped"


@pytest.mark.parametrize(
    ("payload", "kept"),
    [
        ({}, None),
        ({"result_ttl": 60}, 60),
        ({"result_ttl": 90.6}, 91),
        ({"result_ttl": 10**30}, returns.LONGEST_TTL),
        ({"result_ttl": 0}, None),
        ({"result_ttl": -5}, None),
        ({"result_ttl": True}, None),
        ({"result_ttl": "60"}, None),
        ({"result_ttl": None}, None),
        ({"result_ttl": math.inf}, None),
        ({"result_ttl": math.nan}, None),
    ],
)
def test_result_ttl_is_the_payloads_when_it_is_sane(
    payload: dict[str, Any], kept: int | None
) -> None:
    assert returns.result_ttl(payload) == kept


# -- on the job's way: conclude() makes the value and result_ttl part of its one outcome
@jobmaster.job(name="tests.unit.returns.job", retry=0)
def returning(value: Any) -> Any:
    return value


def fetched(**fields: Any) -> FetchedJob:
    payload = {
        "jid": "0123456789abcdef01234567",
        "job": "tests.unit.returns.job",
        "args": [1],
        "queue": "default",
        **fields,
    }
    return FetchedJob.read(Unit(raw=wire.encode(payload), queue="default"))


def test_a_success_carries_its_value_encoded_once_and_its_result_ttl() -> None:
    done = conclude(fetched(result_ttl=60), Ran(value={"n": 1}), 1.0, 2.0)
    assert (done.kind, done.result, done.result_ttl) == (Kind.DONE, b'{"n":1}', 60)
    assert conclude(fetched(), Ran(), 1.0, 2.0).result is None
    assert conclude(fetched(), Ran(), 1.0, 2.0).result_ttl is None


def test_a_value_json_cannot_encode_still_succeeds_with_no_result(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="jobmaster.worker.returns"):
        done = conclude(fetched(), Ran(value={1, 2}), 1.0, 2.0)
    assert done.kind == Kind.DONE and done.result is None and done.status == "complete"
    assert "not kept, the job is complete with result None" in caplog.text


def test_a_failure_keeps_its_end_the_jobs_result_ttl_without_a_result() -> None:
    dead = conclude(fetched(result_ttl=30), Ran(RuntimeError("x")), 1.0, 2.0)
    assert (dead.kind, dead.result, dead.result_ttl) == (Kind.DEAD, None, 30)


def test_the_executor_passes_the_return_value_to_the_outcome() -> None:
    executor = Executor(None, Keys(), None, "w", IOCore(None))  # type: ignore[arg-type]
    raw = wire.encode(
        {"jid": "0" * 24, "job": "tests.unit.returns.job", "args": [[1, "a"]], "queue": "q"}
    )
    outcome = executor.run(Unit(raw=raw, queue="q"))
    assert outcome.kind == Kind.DONE and outcome.result == b'[1,"a"]'
