"""The "working" mark: written when a job starts, in a round trip made anyway.

FETCH no longer writes the status (its key is not known before the fetch,
and a script may only touch the keys it is given), and a round trip of its
own per job would slow the hot path. A short job's mark is dropped by its
own FINISH; a longer job's goes out in the flusher's round trip.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.keys import Keys
from jobmaster.scripts import Scripts
from jobmaster.worker.core import MARK_DELAY, IOCore, Marking
from jobmaster.worker.process import WorkerProcess
from tests.helpers import holds_for, wait_until

K = Keys()
INPROG = K.inprogress("host:1:marks")


class Counted:
    """MARK, with a count of the round trips that carried it (counted as the
    I/O core sends them: ``acks_on``; a NOSCRIPT's reload is the same call)."""

    def __init__(self, script: Any) -> None:
        self.script = script
        self.sha = script.sha
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.script(*args, **kwargs)


OPENED: list[IOCore] = []


@pytest.fixture(autouse=True)
def closed_after() -> Iterator[None]:
    """Each IOCore's flusher thread ends with its test (the suite fails on a leak)."""
    yield
    while OPENED:
        OPENED.pop().close()


def acks_on(store: redis.Redis) -> tuple[IOCore, Counted, Scripts]:
    scripts = Scripts(store)
    mark = Counted(scripts.mark)
    acks = IOCore(store, Marking(mark, INPROG, 600, 60))  # type: ignore[arg-type]
    OPENED.append(acks)
    send = acks._send

    def counting(calls: list[Any]) -> None:  # the core's own connection skips Script
        mark.calls += sum(1 for call in calls if call.script is mark)
        send(calls)

    acks._send = counting  # type: ignore[method-assign]
    return acks, mark, scripts


def test_a_job_still_running_after_the_delay_is_marked_working(store: redis.Redis) -> None:
    acks, mark, _ = acks_on(store)
    store.lpush(INPROG, b"long")
    store.set(K.status("long"), "queued")
    acks.mark(K.status("long"), b"long")
    assert store.get(K.status("long")) == b"queued"  # not a round trip of the job's own
    wait_until(lambda: store.get(K.status("long")) == b"working", timeout=2)
    assert mark.calls == 1
    assert 598_000 < store.pttl(K.status("long")) <= 600_000 - MARK_DELAY * 1000


def test_a_short_jobs_mark_is_dropped_by_its_finish(
    store: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A job shorter than the delay: 50 ms is less than a loaded CI machine may
    # pause this thread between the two calls (it failed so, at nice 19).
    delay = 0.5
    monkeypatch.setattr("jobmaster.worker.core.MARK_DELAY", delay)
    acks, mark, _ = acks_on(store)
    finish = Counted(store.register_script("return redis.call('SET', KEYS[1], ARGV[1])"))
    store.lpush(INPROG, b"short")
    acks.mark(K.status("short"), b"short")
    acks.call(finish, [K.status("short")], ["complete"], settles=K.status("short"))  # type: ignore[arg-type]
    holds_for(3 * delay, lambda: store.get(K.status("short")) == b"complete")
    assert mark.calls == 0


def test_a_job_pushed_back_before_its_mark_went_out_is_not_marked(store: redis.Redis) -> None:
    acks, _, _ = acks_on(store)
    store.set(K.status("back"), "queued")
    acks.mark(K.status("back"), b"back")  # never (or no longer) in the in-progress list
    holds_for(4 * MARK_DELAY, lambda: store.get(K.status("back")) == b"queued")


def test_no_op_jobs_cost_no_mark_and_a_slow_one_shows_working(
    make_config: Callable[..., Config],
    client: Client,
    store: redis.Redis,
    monkeypatch: Any,
) -> None:
    calls: list[int] = []
    original = IOCore._due_marks

    def counted(self: IOCore, now: float) -> Any:
        found = original(self, now)
        if found is not None:
            calls.append(len(found.keys) - 1)
        return found

    monkeypatch.setattr(IOCore, "_due_marks", counted)
    worker = WorkerProcess(make_config(concurrency=4))
    worker.start()
    try:
        jids = [client.push({"job": "tests.record", "args": [f"n{i}"]}) for i in range(50)]
        wait_until(lambda: all(client.status(j) == "complete" for j in jids), timeout=20)
        # Fast jobs: their FINISH came first. (Not exactly none: on a loaded
        # machine, a thread may be held past MARK_DELAY between start and end.)
        assert sum(calls) <= 10, calls
        calls.clear()
        slow = client.push({"job": "tests.record", "args": ["slow", 1.0]})
        wait_until(lambda: client.status(slow) == "working", timeout=10)
        wait_until(lambda: client.status(slow) == "complete", timeout=10)
        assert calls == [1]
    finally:
        worker.stop(timeout=5)


def test_a_long_runs_mark_is_renewed_on_the_heartbeats_pipeline_until_it_ends(
    store: redis.Redis,
) -> None:
    """status_ttl 1, heartbeat TTL 2: the mark lasts status_ttl + 2 s, and only
    a renewal keeps it past that (the heartbeat sends ``refresh``'s MARK)."""
    scripts = Scripts(store)
    acks = IOCore(store, Marking(scripts.mark, INPROG, 1, 2))
    OPENED.append(acks)
    store.lpush(INPROG, b"long")
    acks.mark(K.status("long"), b"long")
    wait_until(lambda: store.get(K.status("long")) == b"working", timeout=2)
    assert 2_000 < store.pttl(K.status("long")) <= 3_000  # not the 1 s left of status_ttl
    store.pexpire(K.status("long"), 10)  # as if it ran its mark's whole TTL
    pipe = store.pipeline()
    acks.refresh(pipe)
    assert pipe.execute() == [1]
    assert 2_000 < store.pttl(K.status("long")) <= 3_000
    acks.ended(K.status("long"))
    pipe = store.pipeline()
    acks.refresh(pipe)
    assert pipe.execute() == []  # nothing kept alive once it ended


def test_a_mark_that_leaves_two_heartbeat_ttls_keeps_the_runtime_exact() -> None:
    marking = Marking(None, INPROG, 600, 60)  # type: ignore[arg-type]
    assert marking.ttl_ms(10.0) == 590_000 and not marking.refreshed(10.0)
    assert marking.ttl_ms(481.0) == 660_000 and marking.refreshed(481.0)
    assert Marking(None, INPROG, 2, 60).ttl_ms(0.05) == 62_000  # type: ignore[arg-type]
