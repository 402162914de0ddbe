"""Signals sent to every process of a pool, and a poison pill among innocent jobs.

``systemctl kill -s SIG``, supervisord, container runtimes and a terminal's
process group signal the master and its children at once. Only the master
acts: a child never dies, stops or reruns a job because of it (SPEC §7).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import redis

from jobmaster.client import Client
from jobmaster.keys import Keys
from tests.helpers import holds_for, wait_until
from tests.process.conftest import JobmasterProcess
from tests.process.test_master import child_processes, diagnose, working_children

pytestmark = pytest.mark.process
K = Keys()
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]


def signal_everyone(master: JobmasterProcess, signum: int) -> list[int]:
    """Signal the master and each of its children, as ``systemctl kill`` does."""
    pids = [master.pid, *(p.pid for p in child_processes(master))]
    for pid in pids:
        psutil.Process(pid).send_signal(signum)
    return pids[1:]


def stopped(pids: list[int]) -> list[int]:
    found = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_STOPPED:
                found.append(pid)
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.mark.timeout(120)
def test_signals_sent_to_every_process_are_acted_on_by_the_master_alone(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=2, concurrency=2, shutdown_timeout=20)))
    working_children(store, master, 2)
    markers = [f"job{n}" for n in range(40)]
    Client(redis_url).push_bulk({"job": "tests.record", "args": [[m, 0.3] for m in markers]})
    wait_until(lambda: store.scard("test:started") >= 2, timeout=15)

    for signum in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTTIN, signal.SIGTTOU):
        children = signal_everyone(master, signum)
        # Not stopped (TTIN/TTOU's default action); none died (USR2's default)
        # but the one a TTOU retires, gracefully (the log is checked below).
        holds_for(0.5, lambda c=children: stopped(c) == [], f"{signum}: a child stopped")
        if signum in (signal.SIGUSR1, signal.SIGUSR2):
            assert all(psutil.pid_exists(pid) for pid in children), f"{signum}: a child died"
    signal_everyone(master, signal.SIGHUP)  # the master replaces them, gracefully

    wanted = {m.encode() for m in markers}
    try:
        wait_until(lambda: wanted <= store.smembers("test:done"), timeout=60)
    except AssertionError:
        raise AssertionError(f"jobs not done:\n{diagnose(store, master, markers)}") from None
    counts = {k.decode(): int(v) for k, v in store.hgetall("test:runs").items()}
    assert {m: counts.get(m) for m in markers} == dict.fromkeys(markers, 1), "a job ran again"
    log = master.log()
    assert "died" not in log, "a child died of a signal meant for the master"
    assert "stopped (replaced (HUP))" in log
    assert log.count("ignored SIGTTIN: only the master acts on it") >= 2
    assert master.popen.poll() is None
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == 0


@pytest.mark.timeout(120)
def test_a_poison_pill_buries_itself_and_none_of_the_jobs_beside_it(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    """One child, 4 threads, max_crashes 2: three 2-second jobs start, then one
    that SIGKILLs its process after 0.5 s. Its first death makes all four
    suspects (none counted); each then runs alone, and the pill's next death
    is its own: it ends dead, the three innocent jobs complete."""
    master = run_jobmaster(
        "-c", str(write_config(processes=1, concurrency=4, max_crashes=2, shutdown_timeout=10))
    )
    working_children(store, master, 1)
    client = Client(redis_url)
    innocents = [f"innocent{n}" for n in range(3)]
    client.push_bulk({"job": "tests.record", "args": [[m, 2.0] for m in innocents]})
    wait_until(lambda: store.scard("test:started") == 3, timeout=15)
    pill = client.push({"job": "tests.kill_self_after", "args": ["pill", 0.5]})
    try:
        wait_until(lambda: store.zcard(K.dead) == 1, timeout=60, message="the pill dead")
        wanted = {m.encode() for m in innocents}
        wait_until(lambda: wanted <= store.smembers("test:done"), timeout=30)
    except AssertionError:
        raise AssertionError(diagnose(store, master, innocents)) from None
    [entry] = [json.loads(raw) for raw in store.zrange(K.dead, 0, -1)]
    assert entry["jid"] == pill
    assert entry["dead_reason"] == (
        "the worker process died while running this job 2 times: SIGKILL"
    )
    # Its first death was shared with the jobs beside it: not counted. Then it
    # ran alone, twice.
    assert int(store.hget("test:attempts", "pill") or 0) == 3
    assert store.zcard(K.retry) == 0
    assert master.popen.poll() is None
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == 0
