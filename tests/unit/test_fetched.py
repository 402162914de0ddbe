"""A fetched job read once (fetched.py), made into its one outcome (outcome.conclude).

No Redis: a job of no batch reads nothing from it on its way, and the
Executor is given no client.
"""

from __future__ import annotations

from typing import Any

import pytest

import jobmaster
from jobmaster import payload as wire
from jobmaster.keys import Keys
from jobmaster.worker import fetched as fetched_module
from jobmaster.worker import outcome as outcome_module
from jobmaster.worker.core import IOCore
from jobmaster.worker.executor import Executor
from jobmaster.worker.fetched import FetchedJob
from jobmaster.worker.outcome import HeldBack, Kind, Ran, Refused, Skipped, conclude
from jobmaster.worker.unit import Unit
from jobmaster.workflows.steps import Step

CALLS: list[str] = []
HOOKED: list[str] = []


@jobmaster.job(
    name="tests.unit.fetched.job",
    timeout=30,
    retry=2,
    on_success=lambda payload: HOOKED.append("success"),
    on_failure=lambda payload, error: HOOKED.append(f"failure: {error}"),
)
def job(marker: str, fail: bool = False) -> None:
    CALLS.append(marker)
    if fail:
        raise RuntimeError(marker)


def unit(**fields: Any) -> Unit:
    payload = {
        "jid": "0123456789abcdef01234567",
        "job": "tests.unit.fetched.job",
        "args": ["a"],
        "queue": "default",
        **fields,
    }
    return Unit(raw=wire.encode(payload), queue="default")


def test_read_once_holds_what_the_way_needs() -> None:
    chain = {"id": "c1", "rest": []}
    read = FetchedJob.read(
        unit(unique="until_executed", unique_digest="d1", chain=chain, timeout=5)
    )
    assert (read.jid, read.name, read.queue) == ("0123456789abcdef01234567", job.name, "default")
    assert read.refused is None and read.arguments == (["a"], {})
    assert read.step == Step(None, chain, {})
    assert read.timeout == 5.0  # the payload's, over the job's 30
    assert (read.until_executed, read.until_started) == ("d1", None)
    assert read.options.retry == 2
    assert FetchedJob.read(unit(unique="until_started", unique_digest="d2")).until_started == "d2"
    assert FetchedJob.read(unit()).timeout == 30.0


def test_a_job_not_registered_is_read_and_refused_not_raised() -> None:
    read = FetchedJob.read(unit(job="nobody.knows"))
    assert read.function is None and read.refused == "no job registered as 'nobody.knows'"
    with pytest.raises(wire.BadPayload):
        FetchedJob.read(Unit(raw=b"not json", queue="default"))


def test_one_outcome_carries_lock_step_and_hook() -> None:
    read = FetchedJob.read(unit(unique="until_executed", unique_digest="d1", chain={"id": "c"}))
    done = conclude(read, Ran(), 1.0, 2.0)
    assert (done.kind, done.unique_digest, done.workflow) == (Kind.DONE, "d1", read.step)
    assert (done.started_at, done.ended_at) == (1.0, 2.0)
    assert done.hook is not None
    retry = conclude(read, Ran(RuntimeError("x")), 1.0, 2.0)
    assert (retry.kind, retry.unique_digest, retry.hook) == (Kind.RETRY, "d1", None)
    dead = conclude(FetchedJob.read(unit(retry=0)), Ran(RuntimeError("x")), 1.0, 2.0)
    assert dead.kind is Kind.DEAD and dead.hook is not None


def test_endings_that_did_not_run_carry_what_they_always_did() -> None:
    read = FetchedJob.read(unit(unique="until_executed", unique_digest="d1", batch="b1"))
    held = conclude(read, HeldBack(10.0, "later"), 1.0, 2.0)
    assert (held.kind, held.score, held.unique_digest, held.workflow) == (
        Kind.DEFERRED,
        12.0,
        "d1",  # kept through the wait
        None,  # not an attempt: the batch is not told
    )
    skipped = conclude(read, Skipped(), 1.0, 2.0)
    assert (skipped.kind, skipped.unique_digest, skipped.workflow) == (
        Kind.SKIPPED,
        None,
        read.step,
    )
    refused = conclude(read, Refused("no"), 1.0, 2.0)
    assert (refused.kind, refused.reason, refused.workflow) == (Kind.DEAD, "no", None)


def test_a_kind_is_its_text_where_it_crosses_modules() -> None:
    assert Kind.DONE == "done" and f"{Kind.RETRY}" == "retry"
    assert {"dead": 1}.get(Kind.DEAD) == 1


def test_the_way_reads_the_payload_and_its_step_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """One job through the Executor: decoded once, its workflow step computed once,
    its hook bound to its one outcome."""
    decoded: list[bytes] = []
    stepped: list[object] = []
    decode, step_of = wire.decode, fetched_module.step_of
    monkeypatch.setattr(wire, "decode", lambda raw: decoded.append(raw) or decode(raw))
    monkeypatch.setattr(
        fetched_module, "step_of", lambda payload: stepped.append(1) or step_of(payload)
    )
    monkeypatch.setattr(outcome_module, "step_of", lambda payload: pytest.fail("step_of again"))
    executor = Executor(None, Keys(), None, "w", IOCore(None))  # type: ignore[arg-type]
    CALLS.clear()
    HOOKED.clear()
    outcome = executor.run(unit(chain={"id": "c"}))
    assert outcome.kind is Kind.DONE and outcome.workflow is not None
    assert CALLS == ["a"] and len(decoded) == 1 and len(stepped) == 1
    assert outcome.hook is not None
    outcome.hook()
    assert HOOKED == ["success"]
