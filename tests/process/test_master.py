"""The master (``jobmaster -c``) as a real process tree: fork, signals, requeue, recovery."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import redis

from jobmaster import exitcodes
from jobmaster.client import Client
from jobmaster.keys import Keys
from jobmaster.supervisor.master import DUTIES_GRACE
from tests.helpers import holds_for, wait_until
from tests.process.conftest import JobmasterProcess

pytestmark = pytest.mark.process
K = Keys()
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]


def title(pid: int) -> str:
    """The process title (setproctitle pads the command line with empty strings)."""
    return " ".join(part for part in psutil.Process(pid).cmdline() if part)


def child_processes(master: JobmasterProcess) -> list[psutil.Process]:
    found = []
    for process in psutil.Process(master.pid).children():
        try:
            if title(process.pid).startswith("jobmaster child"):
                found.append(process)
        except psutil.Error:
            continue
    return found


def working_children(store: redis.Redis, master: JobmasterProcess, count: int) -> list[int]:
    """Wait until ``count`` children have a heartbeat; returns their pids."""
    pids: list[int] = []

    def up() -> bool:
        assert master.popen.poll() is None, f"master exited:\n{master.log()}"
        alive = {p.pid for p in child_processes(master)}
        beating = set()
        for key in store.scan_iter(match=K.heartbeat("*")):
            pid = int(store.hget(key, "pid") or 0)
            if pid in alive and store.hget(key, "role") is None:
                beating.add(pid)
        pids[:] = sorted(beating)
        return len(beating) == count and len(alive) == count

    wait_until(up, timeout=30, message=f"{count} children up")
    return pids


def inprogress_owner(store: redis.Redis, jid: str) -> int | None:
    """The pid of the child whose in-progress list holds ``jid``."""
    for key in store.scan_iter(match=K.inprogress("*")):
        for raw in store.lrange(key, 0, -1):
            if json.loads(raw)["jid"] == jid:
                return int(key.decode().rsplit(":", 2)[-2])
    return None


def diagnose(store: redis.Redis, master: JobmasterProcess, markers: list[str]) -> str:
    """Where every job is, and what the master said: for a failure to be explained."""
    done = {m.decode() for m in store.smembers("test:done")}
    missing = [m for m in markers if m not in done]
    extra = sorted(done - set(markers))
    lines = [
        f"missing {len(missing)}: {missing[:10]}; not from this test: {extra[:10]}",
        f"runs not 1: {[(k, v) for k, v in store.hgetall('test:runs').items() if v != b'1'][:10]}",
        f"queue {store.llen(K.queue('default'))}, retry {store.zcard(K.retry)}, "
        f"dead {store.zcard(K.dead)}, scheduled {store.zcard(K.scheduled)}",
        f"paused {store.smembers(K.paused)}",
    ]
    for key in store.scan_iter(match=K.inprogress("*")):
        lines.append(f"{key.decode()}: {store.llen(key)}")
    for key in store.scan_iter(match=K.heartbeat("*")):
        lines.append(f"{key.decode()}: {store.hgetall(key)}")
    lines.append(f"children: {[title(p.pid) for p in child_processes(master)]}")
    lines.append(master.log()[-8000:])
    return "\n".join(lines)


def alive(pid: int) -> bool:
    """Running, not a zombie. A process may exit between two looks at it."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def runs(store: redis.Redis, marker: str) -> int:
    return int(store.hget("test:runs", marker) or 0)


def test_children_appear_with_their_titles(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=2, queues=["default", "low"])))
    working_children(store, master, 2)
    wait_until(
        lambda: title(master.pid) == "jobmaster master [2/2 children] default,low",
        timeout=10,
        message="master title",
    )
    titles = sorted(title(p.pid) for p in child_processes(master))
    assert titles == [
        "jobmaster child 1 [0/3 busy] default,low",
        "jobmaster child 2 [0/3 busy] default,low",
    ]
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=15) == 0


def test_a_sigkilled_child_s_job_restarts_elsewhere_at_once(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=2)))
    working_children(store, master, 2)
    jid = Client(redis_url).push({"job": "tests.record", "args": ["victim", 2]})
    wait_until(lambda: store.sismember("test:started", "victim"), timeout=10)
    victim = inprogress_owner(store, jid)
    assert victim is not None
    store.delete("test:started")
    killed_at = time.monotonic()
    psutil.Process(victim).kill()
    wait_until(lambda: store.sismember("test:started", "victim"), timeout=5)
    assert time.monotonic() - killed_at < 1.5, "the job did not restart within 1.5 s"
    assert inprogress_owner(store, jid) not in (None, victim)
    wait_until(lambda: store.sismember("test:done", "victim"), timeout=10)
    pids = working_children(store, master, 2)
    assert victim not in pids  # replaced
    log = master.log()
    assert f"(pid {victim}) died: SIGKILL (out of memory?); requeueing its jobs" in log
    assert f"(pid {victim}): requeued 1 job(s)" in log  # by the master's Redis thread
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=15) == 0


def test_a_job_that_kills_its_process_is_dead_after_max_crashes(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=2, max_crashes=3)))
    working_children(store, master, 2)
    Client(redis_url).push({"job": "tests.kill_self", "args": ["pill"]})
    wait_until(lambda: store.zcard(K.dead) == 1, timeout=30, message="poison pill dead")
    assert int(store.hget("test:attempts", "pill") or 0) == 3
    [entry] = [json.loads(raw) for raw in store.zrange(K.dead, 0, -1)]
    assert entry["dead_reason"] == (
        "the worker process died while running this job 3 times: SIGKILL"
    )
    assert store.llen(K.queue("default")) == 0
    # The master is healthy: new work still runs.
    Client(redis_url).push({"job": "tests.record", "args": ["after"]})
    wait_until(lambda: store.sismember("test:done", "after"), timeout=15)
    assert master.popen.poll() is None
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=15) == 0


def test_a_poison_pill_goes_to_the_crash_queue_when_one_is_set(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master = run_jobmaster(
        "-c", str(write_config(processes=1, max_crashes=1, crash_queue="bigmem"))
    )
    working_children(store, master, 1)
    jid = Client(redis_url).push({"job": "tests.kill_self", "args": ["heavy"]})
    wait_until(lambda: store.llen(K.queue("bigmem")) == 1, timeout=20)
    payload = json.loads(store.lindex(K.queue("bigmem"), 0))
    assert payload["jid"] == jid and payload["queue"] == "bigmem"
    assert store.zcard(K.dead) == 0
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=15) == 0


def test_tstp_holds_new_jobs_and_cont_runs_them(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=2)))
    working_children(store, master, 2)
    master.signal(signal.SIGTSTP)
    wait_until(lambda: master.log().count("quiet: no new jobs") == 2, timeout=10)
    Client(redis_url).push({"job": "tests.record", "args": ["held"]})
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:  # quiet children would have started it in ms
        assert not store.sismember("test:started", "held")
        time.sleep(0.05)
    wait_until(lambda: title(master.pid).endswith(" quiet"), timeout=5)
    master.signal(signal.SIGCONT)
    wait_until(lambda: store.sismember("test:done", "held"), timeout=10)
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=15) == 0


@pytest.mark.parametrize("to_group", [False, True], ids=["master", "process group"])
def test_term_lets_a_short_job_finish(
    to_group: bool, run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=2, shutdown_timeout=10)))
    working_children(store, master, 2)
    Client(redis_url).push({"job": "tests.record", "args": ["short", 1.0]})
    wait_until(lambda: store.sismember("test:started", "short"), timeout=10)
    if to_group:
        master.signal_group(signal.SIGTERM)
        master.signal_group(signal.SIGTERM)  # Heroku may send it twice
    else:
        master.signal(signal.SIGTERM)
    assert master.wait(timeout=15) == 0
    assert store.sismember("test:done", "short") and runs(store, "short") == 1
    assert store.llen(K.queue("default")) == 0


@pytest.mark.parametrize("to_group", [False, True], ids=["master", "process group"])
def test_term_pushes_back_a_long_job_and_the_next_master_runs_it(
    to_group: bool, run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    config = write_config(processes=2, shutdown_timeout=2)
    master = run_jobmaster("-c", str(config))
    working_children(store, master, 2)
    jid = Client(redis_url).push({"job": "tests.record", "args": ["long", 60]})
    wait_until(lambda: store.sismember("test:started", "long"), timeout=10)
    begun = time.monotonic()
    (master.signal_group if to_group else master.signal)(signal.SIGTERM)
    assert master.wait(timeout=15) == 0
    # shutdown_timeout, then at most DUTIES_GRACE for the Redis thread's last
    # pass (the push-back itself is the child's): the design's bound, not the 60 s job's.
    assert time.monotonic() - begun < 2 + DUTIES_GRACE + 1
    [payload] = [json.loads(raw) for raw in store.lrange(K.queue("default"), 0, -1)]
    assert payload["jid"] == jid
    assert not psutil.pid_exists(inprogress_owner(store, jid) or -1)
    # The next master runs it: shortened so the test need not wait a minute.
    store.delete(K.queue("default"))
    store.rpush(K.queue("default"), json.dumps({**payload, "args": ["long", 0]}))
    second = run_jobmaster("-c", str(config))
    wait_until(lambda: store.sismember("test:done", "long"), timeout=20)
    second.signal(signal.SIGTERM)
    assert second.wait(timeout=15) == 0


def test_hup_replaces_every_child_and_each_job_runs_exactly_once(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=2, shutdown_timeout=10)))
    before = set(working_children(store, master, 2))
    client = Client(redis_url)
    markers = [f"flow{n}" for n in range(1000)]
    client.push_bulk({"job": "tests.record", "args": [[m, 0.002] for m in markers[:500]]})
    wait_until(lambda: store.scard("test:done") >= 100, timeout=30)
    master.signal(signal.SIGHUP)
    client.push_bulk({"job": "tests.record", "args": [[m, 0.002] for m in markers[500:]]})
    try:
        wanted = {m.encode() for m in markers}
        wait_until(lambda: wanted <= store.smembers("test:done"), timeout=90)
    except AssertionError:
        raise AssertionError(f"1,000 jobs not done:\n{diagnose(store, master, markers)}") from None
    after = set(working_children(store, master, 2))
    assert not before & after, "a child was not replaced"
    counts = {k.decode(): int(v) for k, v in store.hgetall("test:runs").items()}
    assert {m: counts.get(m) for m in markers} == dict.fromkeys(markers, 1)
    assert master.log().count("stopped (replaced (HUP))") == 2
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=15) == 0


def test_ttin_adds_a_child_and_ttou_removes_one(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=1)))
    working_children(store, master, 1)
    master.signal(signal.SIGTTIN)
    working_children(store, master, 2)
    master.signal(signal.SIGTTOU)
    working_children(store, master, 1)
    wait_until(lambda: "stopped (pool shrunk (TTOU))" in master.log(), timeout=10)
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=15) == 0


def test_children_of_a_sigkilled_master_stop_and_push_back_their_jobs(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=2, shutdown_timeout=2)))
    pids = working_children(store, master, 2)
    jid = Client(redis_url).push({"job": "tests.record", "args": ["orphaned", 60]})
    wait_until(lambda: store.sismember("test:started", "orphaned"), timeout=10)
    master.signal(signal.SIGKILL)
    master.wait(timeout=10)
    wait_until(lambda: not any(map(alive, pids)), timeout=10, message="children gone within 10 s")
    [payload] = [json.loads(raw) for raw in store.lrange(K.queue("default"), 0, -1)]
    assert payload["jid"] == jid  # pushed back by its child before it left


def test_a_child_left_unreaped_by_a_sigkilled_master_is_requeued_by_the_next_master_at_once(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    """The master dies in the moment after its child did, before reaping it:
    the child's heartbeat looks alive for heartbeat_ttl (60 s), but its
    process is gone from this machine, so the next master requeues its job
    before forking."""
    config = write_config(processes=1, heartbeat_ttl=60)
    master = run_jobmaster("-c", str(config))
    [child] = working_children(store, master, 1)
    jid = Client(redis_url).push({"job": "tests.record", "args": ["stranded", 1]})
    wait_until(lambda: store.sismember("test:started", "stranded"), timeout=10)
    os.kill(child, signal.SIGSTOP)  # it cannot notice its master's death
    master.signal(signal.SIGKILL)
    master.wait(timeout=10)
    os.kill(child, signal.SIGKILL)
    wait_until(
        lambda: not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie",
        timeout=10,
    )
    assert inprogress_owner(store, jid) == child
    [beat] = [
        k for k in store.scan_iter(match=K.heartbeat("*")) if store.hget(k, "pid") == b"%d" % child
    ]
    assert store.ttl(beat) > 30  # it still looks alive
    store.delete("test:started")
    second = run_jobmaster("-c", str(config))
    wait_until(lambda: store.sismember("test:started", "stranded"), timeout=10)
    assert "whose process is gone from this machine: requeued 1" in second.log()
    wait_until(lambda: store.sismember("test:done", "stranded"), timeout=10)
    second.signal(signal.SIGTERM)
    assert second.wait(timeout=15) == 0


def test_a_child_replaced_while_the_pool_is_quiet_starts_no_job_until_resumed(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=1)))
    [child] = working_children(store, master, 1)
    master.signal(signal.SIGTSTP)
    wait_until(lambda: "quiet: no new jobs will be fetched" in master.log(), timeout=10)
    Client(redis_url).push_bulk({"job": "tests.record", "args": [[f"q{n}"] for n in range(20)]})
    psutil.Process(child).kill()
    wait_until(lambda: child not in {p.pid for p in child_processes(master)}, timeout=10)
    [replacement] = working_children(store, master, 1)
    assert replacement != child
    holds_for(2.0, lambda: store.scard("test:started") == 0, "a job started while quiet")
    master.signal(signal.SIGCONT)
    wait_until(lambda: store.scard("test:done") == 20, timeout=30, message="all 20 ran")
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=15) == 0


def test_usr1_logs_each_thread_s_traceback(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=2)))
    working_children(store, master, 2)
    master.signal(signal.SIGUSR1)
    for thread in ("MainThread", "jobmaster-processor-0", "jobmaster-heartbeat"):
        wait_until(
            lambda thread=thread: master.log().count(f"traceback of thread {thread}:") == 2,
            timeout=10,
            message=f"both children dumped {thread}",
        )
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=15) == 0


def test_remote_quiet_and_stop_of_the_master_through_redis(
    run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=1)))
    working_children(store, master, 1)
    found = []

    def master_heartbeat() -> bool:
        found[:] = [
            key.decode().rsplit("heartbeat:", 1)[1]
            for key in store.scan_iter(match=K.heartbeat("*"))
            if store.hget(key, "role") == b"master"
        ]
        return bool(found)

    wait_until(master_heartbeat, timeout=10, message="the master's heartbeat")
    identity = found[0]
    store.rpush(K.control(identity), "quiet")
    wait_until(lambda: "quiet: no new jobs" in master.log(), timeout=5)
    store.rpush(K.control(identity), "stop")
    assert master.wait(timeout=15) == exitcodes.REMOTE_STOP  # not 0: systemd may restart it
    assert not store.exists(K.heartbeat(identity))


def test_an_app_that_fails_to_import_in_a_child_halts_the_master(
    run_jobmaster: Run, write_config: Write, tmp_path: Path
) -> None:
    master = run_jobmaster(
        "-c", str(write_config(processes=2, preload=False, app=["tests.no_such_module"]))
    )
    assert master.wait(timeout=30) == 3
    log = master.log()
    assert "cannot import app module 'tests.no_such_module'" in log
    assert "halting instead of fork-looping" in log
    assert log.count("child 1 started") == 1  # not restarted in a loop


def test_systemd_notify_messages(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, short_tmp_dir: Path
) -> None:
    path = short_tmp_dir / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(15)
        master = run_jobmaster(
            "-c",
            str(write_config(processes=2)),
            env={"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "400000"},
        )
        messages: list[str] = []

        def received(text: str) -> bool:
            messages.append(sock.recv(4096).decode())
            return any(text in m for m in messages)

        wait_until(lambda: received("READY=1"), timeout=20, message="READY=1")
        assert any("STATUS=2/2 children" in m for m in messages)
        wait_until(lambda: received("WATCHDOG=1"), timeout=10, message="WATCHDOG=1")
        master.signal(signal.SIGTERM)
        wait_until(lambda: received("STOPPING=1"), timeout=10, message="STOPPING=1")
        assert master.wait(timeout=15) == 0


def test_jobs_run_subprocesses_and_a_dead_child_leaves_none_behind(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=1)))
    working_children(store, master, 1)
    client = Client(redis_url)
    client.push({"job": "tests.run_subprocess", "args": ["echoed"]})
    wait_until(lambda: store.sismember("test:done", "echoed"), timeout=10)
    assert store.get("test:output:echoed") == b"echoed"
    jid = client.push({"job": "tests.spawn_sleeper", "args": ["sleeper"], "retry": 0})
    wait_until(lambda: store.sismember("test:started", "sleeper"), timeout=10)
    sleeper = int(store.get("test:subprocess:sleeper") or 0)
    assert psutil.pid_exists(sleeper)
    owner = inprogress_owner(store, jid)
    assert owner is not None
    psutil.Process(owner).kill()
    wait_until(
        lambda: not alive(sleeper),
        timeout=5,
        message="the job's subprocess was killed with its child",
    )
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=15) == 0


def test_a_child_that_gets_term_itself_finishes_its_job_and_is_replaced(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=1, shutdown_timeout=10)))
    [pid] = working_children(store, master, 1)
    Client(redis_url).push({"job": "tests.record", "args": ["own-term", 1.0]})
    wait_until(lambda: store.sismember("test:started", "own-term"), timeout=10)
    psutil.Process(pid).terminate()  # as a platform signalling every process would
    psutil.Process(pid).terminate()
    wait_until(lambda: store.sismember("test:done", "own-term"), timeout=10)
    assert runs(store, "own-term") == 1
    # The job's body ends before its acknowledgement and the child's exit.
    gone = f"(pid {pid}) exited on its own (exit code 0); replacing it"
    wait_until(lambda: gone in master.log(), timeout=10, message="the child exited, cleanly")
    [replacement] = working_children(store, master, 1)
    assert replacement != pid
    assert "died" not in master.log()  # a clean exit is not a crash
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=15) == 0


def test_a_job_stuck_in_c_past_its_timeout_gets_its_child_recycled(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master = run_jobmaster(
        "-c", str(write_config(processes=1, concurrency=3, timeout_grace=1, memory_grace=10))
    )
    [first] = working_children(store, master, 1)
    client = Client(redis_url)
    jid = client.push({"job": "tests.stuck_in_c", "args": ["stuck", 60]})  # timeout=1, retry=0
    wait_until(lambda: store.sismember("test:started", "stuck"), timeout=10)
    client.push_bulk({"job": "tests.record", "args": [["other1", 2], ["other2", 2]]})
    wait_until(lambda: store.zcard(K.dead) == 1, timeout=15, message="the stuck job failed")
    [entry] = [json.loads(raw) for raw in store.zrange(K.dead, 0, -1)]
    assert entry["jid"] == jid and entry["error_class"] == "JobTimeout"
    assert "still running 1s after its timeout of 1s" in entry["error_message"]
    # Its child is replaced; the other jobs it was running complete, once each.
    wait_until(lambda: store.scard("test:done") == 2, timeout=20)
    assert runs(store, "other1") == runs(store, "other2") == 1
    wait_until(
        lambda: not alive(first),
        timeout=20,
        message="the stuck child is gone",
    )
    assert not store.sismember("test:returned", "stuck")
    log = master.log()
    assert "has a job stuck past its timeout: recycling it" in log and "died" not in log
    assert working_children(store, master, 1) != [first]
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=20) == 0


def test_a_poison_pill_s_on_failure_hook_runs_once_in_a_worker(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=2, max_crashes=2)))
    working_children(store, master, 2)
    Client(redis_url).push({"job": "tests.kill_self_hooked", "args": ["pill-hook"]})
    wait_until(
        lambda: store.hget("test:hooks", "failure:pill-hook") == b"PoisonPill",
        timeout=30,
        message="the hook ran with a PoisonPill error",
    )
    assert int(store.hget("test:attempts", "pill-hook") or 0) == 2
    wait_until(lambda: store.llen(K.queue("default")) == 0, timeout=10)
    assert store.zcard(K.dead) == 1  # the pill; the hook job itself succeeded
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=20) == 0
