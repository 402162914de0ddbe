"""``jobmaster.current_job()`` (jobmaster/current.py): what it says, and where it is seen."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import jobmaster
from jobmaster.current import JobInfo, running_job
from jobmaster.testing import inline


def payload(**fields: Any) -> dict[str, Any]:
    return {"jid": "a" * 24, "job": "myapp.jobs.send", "args": [], "queue": "default", **fields}


def test_the_fields_come_from_the_payload() -> None:
    info = JobInfo.of(payload(enqueued_at=1764432000.5, batch="b1"), "critical")
    assert info == JobInfo(
        jid="a" * 24,
        name="myapp.jobs.send",
        queue="critical",  # the queue it was fetched from
        attempt=1,
        enqueued_at=1764432000.5,
        batch_id="b1",
    )


@pytest.mark.parametrize(
    ("retry_count", "attempt"),
    [(None, 1), (0, 1), (1, 2), (24, 25), ("3", 1), (True, 1), (-4, 1), (2.5, 1)],
)
def test_attempt_is_the_retries_made_plus_one_and_a_forged_count_reads_as_none(
    retry_count: object, attempt: int
) -> None:
    fields = {} if retry_count is None else {"retry_count": retry_count}
    assert JobInfo.of(payload(**fields)).attempt == attempt


@pytest.mark.parametrize(
    ("retry_count", "interrupted_count", "attempt"),
    [(None, 1, 2), (2, 1, 4), (0, 3, 4), (1, "2", 2), (1, -1, 2), (None, True, 1)],
)
def test_attempt_counts_runs_cut_short_too(
    retry_count: object, interrupted_count: object, attempt: int
) -> None:
    """A crash or a stop's push-back while the job ran is a run: SPEC §11's
    attempt counts runs (a forged count reads as none)."""
    fields = {"interrupted_count": interrupted_count}
    if retry_count is not None:
        fields["retry_count"] = retry_count
    assert JobInfo.of(payload(**fields)).attempt == attempt


@pytest.mark.parametrize("value", [None, "yesterday", float("nan"), True])
def test_a_missing_or_forged_enqueued_at_reads_as_none(value: object) -> None:
    assert JobInfo.of(payload(enqueued_at=value)).enqueued_at is None


@pytest.mark.parametrize("value", [None, "", 7, {"id": "x"}])
def test_batch_id_is_none_outside_a_batch(value: object) -> None:
    assert JobInfo.of(payload(batch=value)).batch_id is None


def test_none_outside_a_job_and_set_only_for_the_job_s_duration() -> None:
    assert jobmaster.current_job() is None
    with running_job(payload(), "default") as info:
        assert jobmaster.current_job() is info
    assert jobmaster.current_job() is None


def test_each_thread_sees_its_own_job() -> None:
    seen: dict[str, str | None] = {}
    barrier = threading.Barrier(2, timeout=5)

    def run(jid: str) -> None:
        with running_job(payload(jid=jid)):
            barrier.wait()  # both jobs run at once
            info = jobmaster.current_job()
            seen[jid] = info.jid if info else None

    threads = [threading.Thread(target=run, args=(jid,)) for jid in ("j1", "j2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=5)
    assert seen == {"j1": "j1", "j2": "j2"}
    assert jobmaster.current_job() is None  # nor does this thread see theirs


def test_an_asyncio_task_started_by_a_job_inherits_it() -> None:
    async def task() -> str | None:
        info = jobmaster.current_job()
        return info.jid if info else None

    async def job_body() -> str | None:
        return await asyncio.create_task(task())

    with running_job(payload(jid="async-1")):
        assert asyncio.run(job_body()) == "async-1"


seen_by_recorder: list[Any] = []


@jobmaster.job(name="tests.unit.current_job_recorder")
def recorder() -> None:
    """Reports what it sees in a module-level list: inline() hands a job JSON
    copies of its arguments, so a list passed in would not come back."""
    info = jobmaster.current_job()
    seen_by_recorder.append(
        None if info is None else (info.jid, info.name, info.queue, info.attempt)
    )


def test_inline_runs_see_their_job_and_a_plain_call_is_no_job() -> None:
    seen_by_recorder.clear()
    recorder()
    with inline():
        jid = recorder.options(queue="low").enqueue()
    expected = [None, (jid, "tests.unit.current_job_recorder", "low", 1)]
    assert seen_by_recorder == expected
