"""The embedded Redis's watch (embedded_watch.py) against a fake server: when
it restarts, how it backs off, and that a failed restart never escapes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from jobmaster.embedded import EmbeddedRedis
from jobmaster.embedded_watch import BACKOFF_MAX, STABLE, EmbeddedWatch, one_line
from jobmaster.errors import JobmasterError


@dataclass
class FakeServer:
    running: bool = True
    failing: bool = False
    starts: list[float] = field(default_factory=list)

    @property
    def process(self) -> FakeServer:
        return self

    def is_running(self) -> bool:
        return self.running

    def ensure_running(self) -> bool:
        if self.failing:
            raise JobmasterError("redis-server exited with code 1 while starting; log tail:\nbad")
        self.running = True
        self.starts.append(0.0)
        return True


def watch_of(server: FakeServer, up_since: float = 0.0) -> EmbeddedWatch:
    watch = EmbeddedWatch(cast("EmbeddedRedis", cast("Any", server)))
    watch._up_since = up_since
    return watch


def test_a_server_that_ran_long_is_restarted_at_once() -> None:
    server = FakeServer()
    watch = watch_of(server)
    watch.check(STABLE + 1)
    assert server.starts == []
    server.running = False
    watch.check(STABLE + 2)
    assert len(server.starts) == 1 and watch.delay == 0.0


def test_a_server_that_dies_soon_waits_a_growing_backoff() -> None:
    server = FakeServer(running=False)
    watch = watch_of(server, up_since=100.0)
    watch.check(101.0)  # died 1 s after its start: 1 s first
    assert server.starts == [] and watch.delay == 1.0
    watch.check(102.0)
    assert len(server.starts) == 1
    server.running = False
    watch._up_since = 102.0
    watch.check(103.0)  # died again soon: 2 s
    assert watch.delay == 2.0 and len(server.starts) == 1


def test_a_failed_restart_is_logged_and_retried_up_to_the_cap(caplog: Any) -> None:
    server = FakeServer(running=False, failing=True)
    watch = watch_of(server, up_since=0.0)
    now = 1.0
    delays = []
    for _ in range(8):
        watch.check(now)  # never raises
        now = (watch._next_try or now) + 0.01
        delays.append(watch.delay)
    assert delays[:6] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0]  # noticed, then each failure
    assert max(delays) == BACKOFF_MAX and watch.failures >= 6
    lines = [r.getMessage() for r in caplog.records if "could not be restarted" in r.getMessage()]
    assert lines and all("\n" not in line for line in lines)  # one line per event
    server.failing = False
    watch.check(now + BACKOFF_MAX)
    assert server.running and watch.restarts == 1


def test_one_line_keeps_the_end_of_a_long_error() -> None:
    text = one_line(JobmasterError("start\n" + "x" * 2000 + "\nInvalid AOF manifest"))
    assert "\n" not in text and text.endswith("Invalid AOF manifest") and len(text) < 700
