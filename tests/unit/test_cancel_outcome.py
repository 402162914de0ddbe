"""A cancelled job's one outcome (outcome.conclude): status cancelled, no retry,
no dead set, no hook; its lock freed and its batch told; an attempt only if
its code ran."""

from __future__ import annotations

from typing import Any

import jobmaster
from jobmaster import payload as wire
from jobmaster.errors import JobCancelled
from jobmaster.metrics.jobs import JobMetrics
from jobmaster.worker.fetched import FetchedJob
from jobmaster.worker.outcome import Kind, NotStarted, Ran, conclude
from jobmaster.worker.unit import Unit
from jobmaster.workflows.steps import BATCH_EVENTS, follow_up

HOOKED: list[str] = []


@jobmaster.job(
    name="tests.unit.cancel.job",
    retry=5,
    on_failure=lambda payload, error: HOOKED.append(f"failure: {error}"),
)
def job(marker: str) -> None:
    """Never run here: only read."""


def read(**fields: Any) -> FetchedJob:
    payload = {"jid": "0123456789abcdef01234567", "job": job.name, "args": ["a"], **fields}
    return FetchedJob.read(Unit(raw=wire.encode({"queue": "default", **payload}), queue="default"))


def test_a_job_cancelled_while_running_is_a_failed_attempt_not_retried() -> None:
    fetched = read(unique="until_executed", unique_digest="d1", batch="b1")
    outcome = conclude(fetched, Ran(JobCancelled("cancelled while running")), 1.0, 2.0)
    assert (outcome.kind, outcome.status) == (Kind.CANCELLED, "cancelled")
    assert outcome.failed and outcome.attempted  # counted, kept in its history
    assert outcome.stored is None and outcome.score == 0.0  # no retry set, no dead set
    assert outcome.error == "JobCancelled: cancelled while running"
    assert (outcome.unique_digest, outcome.workflow) == ("d1", fetched.step)  # freed; batch told
    assert outcome.hook is None  # on_failure is for failures, not for an operator's cancel


def test_a_job_cancelled_before_it_started_is_no_attempt() -> None:
    outcome = conclude(read(batch="b1"), NotStarted(), 1.0, 1.0)
    assert (outcome.kind, outcome.status) == (Kind.CANCELLED, "cancelled")
    assert not outcome.failed and not outcome.attempted
    assert outcome.reason == "cancelled before it started" and outcome.workflow is not None


def test_a_cancelled_job_is_a_failure_of_its_batch_and_stops_its_chain() -> None:
    assert BATCH_EVENTS[Kind.CANCELLED] == "failed"
    chain = {"id": "c1", "rest": [{"job": "x", "args": [], "kwargs": {}, "options": {}}]}
    assert follow_up(Kind.CANCELLED, chain, 1.0).event == "failed"  # no next step


def test_only_a_job_that_ran_is_counted_in_the_metrics() -> None:
    metrics = JobMetrics()
    metrics.observe_outcome(conclude(read(), NotStarted(), 1.0, 1.0), "default")
    assert metrics.snapshot() == {}
    ran = conclude(read(), Ran(JobCancelled("stop")), 1.0, 3.0)
    metrics.observe_outcome(ran, "default")
    [series] = metrics.snapshot().values()
    assert (series.processed, series.failed) == (1, 1)
