"""Two real masters with the same ``[periodic.NAME]`` entries: each slot enqueued once."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from jobmaster import payload as wire
from jobmaster.keys import Keys
from tests.helpers import wait_until
from tests.process.conftest import JobmasterProcess

pytestmark = pytest.mark.process
K = Keys()


def test_two_masters_enqueue_each_slot_once(
    run_jobmaster: Callable[..., JobmasterProcess],
    write_config: Callable[..., Path],
    store: redis.Redis,
) -> None:
    # "tick" goes to a queue no worker serves, so every payload the masters
    # pushed is still there to count; "ran" shows the jobs do run.
    config = write_config(
        processes=1,
        concurrency=1,
        periodic={
            # A 6-field cron firing every second (croniter reads the sixth field as seconds).
            "tick": {
                "cron": "* * * * * *",
                "job": "tests.record",
                "args": ["tick"],
                "queue": "ticks",
            },
            "ran": {"every": 1, "job": "tests.record", "args": ["periodic"]},
        },
    )
    masters = [run_jobmaster("-c", str(config)) for _ in range(2)]

    def ticked(count: int) -> Callable[[], bool]:
        def check() -> bool:
            for master in masters:
                assert master.popen.poll() is None, f"master exited:\n{master.log()}"
            return store.llen(K.queue("ticks")) >= count

        return check

    # Ten seconds of both masters ticking the same entry every second.
    wait_until(ticked(10), timeout=40, interval=0.1, message="10 periodic slots enqueued")
    wait_until(lambda: store.sismember("test:done", "periodic"), timeout=20, message="a run")
    for master in masters:
        master.signal(signal.SIGTERM)
    for master in masters:
        assert master.wait(timeout=20) == 0, master.log()

    jobs = [wire.decode(raw) for raw in store.lrange(K.queue("ticks"), 0, -1)]
    slots = Counter(job["periodic_slot"] for job in jobs)
    assert all(job["periodic"] == "tick" and job["args"] == ["tick"] for job in jobs)
    assert [slot for slot, n in slots.items() if n > 1] == []  # no slot enqueued twice
    # Nor skipped: both masters ran throughout, so the slots are consecutive seconds.
    assert sorted(slots) == list(range(min(slots), max(slots) + 1))
    assert store.hget(K.periodic_last, "tick") == str(max(slots)).encode()
