"""The real master while Redis is held by ``CLIENT PAUSE`` past its socket timeout.

SPEC §8: the master's loop never waits on Redis. Reaping, forking,
signals and stop deadlines go on while every Redis command hangs; a dead
child's jobs are requeued as soon as Redis answers, and what a stop could
not push back is recovered as after a crash. Each test pauses its own
private server (``CLIENT UNPAUSE`` is held by a pause of ALL too, so a
test waits the pause out).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import redis

from jobmaster.client import Client
from jobmaster.embedded import RedisServerProcess
from jobmaster.supervisor.master import DUTIES_GRACE
from jobmaster.supervisor.stopping import STOP_MARGIN
from tests.helpers import wait_until
from tests.process.conftest import JobmasterProcess
from tests.process.test_master import child_processes, inprogress_owner, title, working_children

pytestmark = pytest.mark.process
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]

SOCKET_TIMEOUT = 10.0  # jobmaster.connection's: a pause must outlast it


def pause(store: redis.Redis, seconds: float) -> float:
    """Hold every client's commands for ``seconds``; returns when it ends (monotonic)."""
    store.execute_command("CLIENT", "PAUSE", int(seconds * 1000), "ALL")
    return time.monotonic() + seconds


def live_children(master: JobmasterProcess) -> set[int]:
    return {p.pid for p in child_processes(master) if p.status() != psutil.STATUS_ZOMBIE}


def start(
    server: RedisServerProcess, write_config: Write, run_jobmaster: Run, **settings: object
) -> JobmasterProcess:
    config = write_config(redis_url=server.url, processes=1, concurrency=2, **settings)
    return run_jobmaster("-c", str(config), env={"JOBMASTER_REDIS_URL": server.url})


@pytest.mark.timeout(90)
def test_a_killed_child_is_replaced_at_once_and_its_job_requeued_once_redis_answers(
    private_redis: RedisServerProcess, write_config: Write, run_jobmaster: Run
) -> None:
    store = private_redis.client(socket_timeout=60)  # outlives a pause
    master = start(private_redis, write_config, run_jobmaster, shutdown_timeout=3)
    [victim] = working_children(store, master, 1)
    jid = Client(private_redis.url).push({"job": "tests.record", "args": ["victim", 4]})
    wait_until(lambda: store.sismember("test:started", "victim"), timeout=10, message="started")
    assert inprogress_owner(store, jid) == victim
    store.delete("test:started")

    resumes_at = pause(store, SOCKET_TIMEOUT + 2)
    killed_at = time.monotonic()
    psutil.Process(victim).kill()
    wait_until(
        lambda: live_children(master) - {victim},
        timeout=3,
        message=f"no new child within 3 s of the kill, Redis paused:\n{master.log()[-3000:]}",
    )
    replaced_in = time.monotonic() - killed_at
    assert time.monotonic() < resumes_at  # all of it while Redis was paused
    assert victim not in live_children(master)  # reaped

    # Redis answers again: the killed child's job is requeued and runs again.
    wait_until(lambda: store.sismember("test:started", "victim"), timeout=20, message="rerun")
    rerun_after = time.monotonic() - resumes_at
    wait_until(lambda: store.sismember("test:done", "victim"), timeout=15, message="done")
    assert int(store.hget("test:runs", "victim") or 0) == 1  # the first run was killed
    log = master.log()
    assert f"(pid {victim}) died: SIGKILL (out of memory?)" in log, log
    assert f"(pid {victim}): requeued 1 job(s)" in log, log
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=20) == 0, master.log()
    print(f"replaced in {replaced_in:.2f}s; job ran again {rerun_after:.2f}s after the pause")


@pytest.mark.timeout(120)
def test_a_stop_ends_on_time_under_a_paused_redis_and_loses_nothing(
    private_redis: RedisServerProcess, write_config: Write, run_jobmaster: Run
) -> None:
    shutdown_timeout = 3.0
    store = private_redis.client(socket_timeout=60)  # outlives a pause
    master = start(private_redis, write_config, run_jobmaster, shutdown_timeout=shutdown_timeout)
    [child] = working_children(store, master, 1)
    jid = Client(private_redis.url).push({"job": "tests.record", "args": ["held", 6]})
    wait_until(lambda: store.sismember("test:started", "held"), timeout=10, message="started")

    # The pause outlasts the whole stop: the child cannot push its job back.
    bound = shutdown_timeout + STOP_MARGIN + DUTIES_GRACE + 1.0  # + a loop pass
    pause(store, bound + 3)
    stopped_at = time.monotonic()
    master.signal(signal.SIGTERM)
    code = master.wait(timeout=bound + 10)
    took = time.monotonic() - stopped_at
    log = master.log()
    assert took < bound, f"the stop took {took:.1f}s under a paused Redis:\n{log[-3000:]}"
    assert code == 0, log
    assert not psutil.pid_exists(child), "the child outlived its master"
    assert "did not stop in time: SIGKILL" in log, log
    assert "Redis did not answer within" in log, log

    # Nothing lost: the job waits in the dead child's list, and the next
    # master's start-up scan (the process and its master are gone) requeues it.
    store.ping()  # returns once the pause is over
    assert inprogress_owner(store, jid) == child
    store.delete("test:started")
    second = start(private_redis, write_config, run_jobmaster)
    wait_until(lambda: store.sismember("test:done", "held"), timeout=30, message="recovered")
    assert int(store.hget("test:runs", "held") or 0) == 1
    assert "whose process is gone from this machine: requeued 1" in second.log(), second.log()
    second.signal(signal.SIGTERM)
    assert second.wait(timeout=20) == 0, second.log()
    print(f"stopped in {took:.2f}s under a paused Redis (bound {bound:.0f}s)")


@pytest.mark.timeout(90)
def test_signals_are_handled_while_redis_is_paused(
    private_redis: RedisServerProcess, write_config: Write, run_jobmaster: Run
) -> None:
    store = private_redis.client(socket_timeout=60)  # outlives a pause
    master = start(private_redis, write_config, run_jobmaster)
    [first] = working_children(store, master, 1)
    resumes_at = pause(store, SOCKET_TIMEOUT + 2)
    # Not a hope but a bound: by now the master has sent Redis a command (it
    # reads its control list every 0.25 s), held by the pause. Signals sent
    # at once could all be handled before that command.
    time.sleep(1.0)

    master.signal(signal.SIGTSTP)
    wait_until(lambda: title(master.pid).endswith(" quiet"), timeout=3, message="quiet")
    assert psutil.Process(first).status() != psutil.STATUS_STOPPED
    master.signal(signal.SIGCONT)
    wait_until(lambda: not title(master.pid).endswith(" quiet"), timeout=3, message="resumed")
    master.signal(signal.SIGTTIN)
    wait_until(lambda: len(live_children(master)) == 2, timeout=3, message="TTIN: a 2nd child")
    assert time.monotonic() < resumes_at  # all of it while Redis was paused

    # Once Redis answers, the heartbeat shows the pool as the loop left it.
    store.ping()
    heartbeat = master_heartbeat(store, master.pid)
    wait_until(
        lambda: store.hmget(heartbeat, "processes", "quiet") == [b"2", b"0"],
        timeout=15,
        message="heartbeat after the pause",
    )
    working_children(store, master, 2)
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=20) == 0, master.log()


def master_heartbeat(store: redis.Redis, pid: int) -> bytes:
    """The key of the heartbeat of the master ``pid``."""
    found: list[bytes] = []

    def beating() -> bool:
        for key in store.scan_iter(match=b"*heartbeat:*"):
            if store.hget(key, "role") == b"master" and int(store.hget(key, "pid") or 0) == pid:
                found.append(key)
                return True
        return False

    wait_until(beating, timeout=15, message="master heartbeat")
    return found[0]
