"""Two entries of the same bytes are two fetches (SPEC §8).

A producer in another language that retries an LPUSH after a lost reply
pushes the same bytes twice. The worker kept its claims by those bytes: the
second claim overwrote the first, one copy was never acknowledged, and the
self-check ran it a third time a minute later. Each copy must leave the
in-progress list with an outcome of its own. (The self-check counts copies:
test_worker.py's test_self_check_requeues_an_entry_no_thread_is_running.)
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from jobmaster import payload as wire
from jobmaster.config import Config
from jobmaster.keys import Keys
from jobmaster.worker.process import WorkerProcess
from tests.helpers import holds_for, wait_until

pytestmark = pytest.mark.timeout(60)
K = Keys()
StartWorker = Callable[[Config], WorkerProcess]


def runs(store: redis.Redis, marker: str) -> int:
    return int(store.hget("test:runs", marker) or 0)


def test_the_same_bytes_pushed_twice_run_twice_and_leave_nothing_in_progress(
    make_config: Callable[..., Config], running_worker: StartWorker, store: redis.Redis
) -> None:
    worker = running_worker(make_config(concurrency=2))
    raw = wire.encode(wire.build("tests.record", ["twin", 0.5], {}, queue="default"))
    store.lpush(K.queue("default"), raw, raw)

    wait_until(lambda: runs(store, "twin") == 2, timeout=10, message="both copies ran")
    wait_until(
        lambda: store.llen(worker.ctx.inprogress_key) == 0,
        timeout=5,
        message="a copy is stranded in progress",
    )
    assert store.get(K.stat("processed")) == b"2"
    holds_for(1.0, lambda: runs(store, "twin") == 2, "a copy ran again")
