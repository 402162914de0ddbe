"""The fetch lock: one round trip fetches for every thread waiting at that moment."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from jobmaster.keys import Keys
from jobmaster.worker.fetch import Fetcher, Unit
from jobmaster.worker.wakeup import WorkSignal
from tests.helpers import wait_until


class SlowFetch:
    """FETCH's stand-in: the first call blocks until released; each returns ``count`` jobs."""

    def __init__(self) -> None:
        self.counts: list[int] = []
        self.release = threading.Event()
        self.made = 0

    def __call__(self, keys: list[str], args: list[Any], client: Any = None) -> list[object]:
        count = int(args[0])  # ARGV[1]: the most jobs to take
        self.counts.append(count)
        if len(self.counts) == 1:
            self.release.wait(10)
        reply: list[object] = [0]
        for _ in range(count):
            self.made += 1
            reply += [f"job-{self.made}".encode(), b"default"]
        return reply


def test_threads_waiting_for_a_fetch_share_the_next_round_trip() -> None:
    slow = SlowFetch()
    keys = Keys()
    ctx = SimpleNamespace(
        config=SimpleNamespace(queue_weights=[("default", 1)], strict=False),
        keys=keys,
        inprogress_key=keys.inprogress("h:1:a"),
        status_ttl=0,
        scripts=SimpleNamespace(fetch=slow),
    )
    fetcher = Fetcher(ctx, WorkSignal())  # type: ignore[arg-type]
    got: list[Unit | None] = []
    threads = [threading.Thread(target=lambda: got.append(fetcher.fetch())) for _ in range(4)]
    threads[0].start()
    wait_until(lambda: slow.counts == [1], timeout=5, message="the first fetch is in flight")
    for thread in threads[1:]:
        thread.start()
    wait_until(lambda: fetcher._waiting == 4, timeout=5, message="three threads wait behind it")
    slow.release.set()
    for thread in threads:
        thread.join(5)
    # The first round trip was for one thread; the second served the other three.
    assert slow.counts == [1, 3]
    assert sorted(unit.raw for unit in got if unit is not None) == [
        b"job-1",
        b"job-2",
        b"job-3",
        b"job-4",
    ]
    assert not fetcher._handoff  # nothing left behind for nobody
