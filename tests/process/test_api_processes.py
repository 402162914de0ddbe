"""ProcessSet against a real ``jobmaster`` master: list it, quiet, resume and stop it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import redis

from jobmaster import exitcodes
from jobmaster.api import Process, ProcessSet, Queue
from jobmaster.client import Client
from tests.helpers import holds_for, wait_until
from tests.process.conftest import JobmasterProcess, wait_for_worker

pytestmark = pytest.mark.process
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]


def title(pid: int) -> str:
    """The process title (setproctitle pads the command line with empty strings)."""
    return " ".join(part for part in psutil.Process(pid).cmdline() if part)


def start(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> tuple[JobmasterProcess, str]:
    # heartbeat_ttl 3: children beat every second, so both show up quickly.
    master = run_jobmaster("-c", str(write_config(processes=2, heartbeat_ttl=3)))
    return master, wait_for_worker(store, master)


def children_of(processes: ProcessSet, identity: str, count: int) -> list[Process]:
    found: list[Process] = []

    def listed() -> bool:
        found[:] = [p for p in processes.list() if p.master == identity]
        return len(found) == count

    wait_until(listed, timeout=20, message=f"{count} children listed")
    return found


def test_lists_the_master_and_its_children_then_quiets_and_resumes_them(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master, identity = start(run_jobmaster, write_config, store)
    processes = ProcessSet(store)
    children = children_of(processes, identity, 2)
    [boss] = [p for p in processes.list() if p.role == "master"]
    assert (boss.identity, boss.pid, boss.concurrency) == (identity, master.pid, 3)
    real = {p.pid for p in psutil.Process(master.pid).children()}
    assert {c.pid for c in children} == real
    assert sorted(c.index or 0 for c in children) == [1, 2]
    assert {c.role for c in children} == {"child"}
    assert set(boss.children) == {c.identity for c in children}
    assert all(c.hostname == boss.hostname and c.queues == ["default"] for c in children)

    assert processes.quiet(identity)
    # The master reads its control list every 0.25 s and forwards TSTP at once.
    wait_until(
        lambda: all(title(c.pid).endswith("quiet") for c in children),
        timeout=1.0,
        message="children quiet within 1 s",
    )
    jid = Client(redis_url).push({"job": "tests.record", "args": ["held"]})
    queue = Queue("default", store)
    holds_for(1.0, lambda: queue.find(str(jid)) is not None, "a quiet child fetched a job")

    assert processes.resume_all() == 1  # the master only: it passes it on
    wait_until(lambda: store.sismember("test:done", "held"), timeout=5, message="job ran")
    assert master.popen.poll() is None


def test_stop_makes_the_master_exit_with_the_remote_stop_code(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> None:
    master, identity = start(run_jobmaster, write_config, store)
    processes = ProcessSet(store)
    children = children_of(processes, identity, 2)
    assert processes.stop(identity)
    # Graceful, with a code of its own: a forged stop is restarted by
    # systemd's Restart=on-failure (exitcodes.REMOTE_STOP).
    assert master.wait(timeout=10) == exitcodes.REMOTE_STOP, master.log()
    assert not any(psutil.pid_exists(c.pid) for c in children)
    wait_until(lambda: processes.list() == [], timeout=5, message="heartbeats removed")
