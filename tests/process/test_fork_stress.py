"""Hundreds of forks by the master's own fork path (spawn.fork_child) while
its Redis thread (supervisor/duties.py) logs and talks to Redis without
pause: no child ever hangs.

The master forks while that thread runs, which Python 3.12+ warns about
("use of fork() may lead to deadlocks in the child"): a lock the thread held
at the instant of the fork stays held in the child. duties.py says why no
such lock is ever taken by a child (its own Redis connections, the logging
handlers held across the fork, nothing imported late); this test is the
evidence, run under every Python that .ci/run tests. Each child does what a
real one does first with what the thread uses: log a line through the same
handlers, open a Redis connection of its own and talk to it.
"""

from __future__ import annotations

import io
import logging
import os
import signal
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from jobmaster.config import Config
from jobmaster.keys import Keys
from jobmaster.pipes import READY
from jobmaster.supervisor import duties as duties_module
from jobmaster.supervisor import spawn
from jobmaster.supervisor.duties import MasterState, RedisDuties

pytestmark = [pytest.mark.process, pytest.mark.timeout(240)]
FORKS = 300
BATCH = 10  # children forked before the first of them is reaped
HANG = 10.0  # seconds: a child that has not exited by then is stuck for good
log = logging.getLogger("jobmaster.test.fork_stress")


class Chatter:
    """The periodic ticker's and history's place in each pass: a line logged
    and a Redis round trip, every pass of the thread."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.ticks = 0

    def tick(self, now: float) -> list[Any]:
        self.ticks += 1
        log.info("pass %d of the Redis thread", self.ticks)
        self.client.incr("test:fork-stress:ticks")
        return []


@pytest.fixture
def log_file(tmp_path: Path) -> Iterator[Path]:
    """A buffered text stream over a file, as the master's stdout is: its
    buffer's lock is what a child inherited held when a line was half written."""
    path = tmp_path / "master.log"
    stream = io.TextIOWrapper(io.BufferedWriter(io.FileIO(path, "w")), line_buffering=True)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(process)d %(threadName)s %(message)s"))
    root = logging.getLogger("jobmaster")
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield path
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        stream.close()


def test_no_child_hangs_when_forked_beside_the_redis_thread(
    redis_url: str, log_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis.Redis.from_url(redis_url)
    chatter = Chatter(client)
    # The thread's passes back to back (it waits on Redis, not on a timer).
    monkeypatch.setattr(duties_module, "CONTROL_INTERVAL", 0.0)
    monkeypatch.setattr(duties_module, "LONGEST_WAIT", 0.001)
    # gc.collect() of this big test process, 300 times, is not what is tested.
    monkeypatch.setattr(spawn, "gc", SimpleNamespace(collect=lambda: 0, freeze=lambda: None))
    monkeypatch.setattr(spawn, "_child_main", light_child(redis_url))
    config = Config(redis_url=redis_url, concurrency=1)
    thread = RedisDuties(
        config=config,
        client=client,
        keys=Keys("forkstress"),
        identity="host:1:forkstress",
        recovery=SimpleNamespace(),  # type: ignore[arg-type]  # no requeue is handed over
        ticker=chatter,  # type: ignore[arg-type]
        history=chatter,  # type: ignore[arg-type]
    )
    thread.publish(MasterState(1, False, False, ()))
    thread.start()
    hung: list[int] = []
    failed: list[tuple[int, int]] = []
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")  # every one, spawn.py's own filter overridden
            for first in range(0, FORKS, BATCH):  # a few alive at once, as a master's
                batch = []
                for number in range(first, first + BATCH):
                    # A state change: the thread writes the heartbeat at once, mid-fork.
                    thread.publish(MasterState(1, bool(number % 2), False, (f"c{number}",)))
                    batch.append((number, spawn.fork_child(config, 1 + number % BATCH)))
                for number, forked in batch:
                    status = reap(forked.pid)
                    if status is None:
                        hung.append(number)
                    elif status != 0 or os.read(forked.ready_fd, 1) != READY:
                        failed.append((number, status))
                    for fd in (forked.ready_fd, forked.requests_fd):
                        os.close(fd)
                    forked.slots.close()
    finally:
        thread.finish(2.0)
    assert not hung, f"children stuck after fork: {hung}\n{log_file.read_text()[-3000:]}"
    assert not failed, f"children that failed (number, wait status): {failed}"
    assert chatter.ticks > FORKS, "the Redis thread was not busy through the forks"
    # What warns under 3.12+ is this fork, the master's own (spawn.py, which
    # ignores it for the reasons above), not only a test's multiprocessing.
    about_fork = [w for w in seen if "multi-threaded, use of fork()" in str(w.message)]
    assert {Path(w.filename).name for w in about_fork} <= {"spawn.py"}, about_fork
    assert bool(about_fork) == (sys.version_info >= (3, 12))
    lines = log_file.read_text().splitlines()
    assert sum("child up" in line for line in lines) == FORKS  # no line lost or torn


def light_child(redis_url: str) -> Any:
    """What a child does first with what the master's thread uses, then exit."""

    def child_main(
        config: Config, index: int, nonce: str, master_pid: int, pipes: tuple[int, int],
        *args: Any, **kwargs: Any,
    ) -> None:  # fmt: skip
        code = 1
        try:
            log.info("child up (index %d)", index)
            redis.Redis.from_url(redis_url).incr("test:fork-stress:children")
            os.write(pipes[0], READY)
            code = 0
        finally:
            os._exit(code)

    return child_main


def reap(pid: int) -> int | None:
    """The child's exit code, or None (killed) if it did not exit within HANG."""
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.002)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None
