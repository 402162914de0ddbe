"""The memory killer and child recycling, with real processes and jobs that leak."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from jobmaster.client import Client
from jobmaster.keys import Keys
from tests.cgroup import ScratchCgroup
from tests.helpers import wait_until
from tests.process.conftest import ROOT, JobmasterProcess, jobmaster_command
from tests.process.test_master import inprogress_owner, working_children

pytestmark = pytest.mark.process
K = Keys()
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]
FAST = {"memory_check_interval": 0.2, "memory_grace": 5}


def exactly_once(store: redis.Redis, markers: list[str]) -> None:
    counts = {k.decode(): int(v) for k, v in store.hgetall("test:runs").items()}
    assert {m: counts.get(m, 0) for m in markers} == dict.fromkeys(markers, 1)
    assert store.zcard(K.dead) == 0 and store.zcard(K.retry) == 0
    assert store.get(K.stat("failed")) is None


def test_a_leaking_child_is_recycled_and_every_job_runs_once(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master = run_jobmaster(
        "-c", str(write_config(processes=1, concurrency=1, max_child_mb=150, **FAST))
    )
    working_children(store, master, 1)
    markers = [f"leak{n}" for n in range(16)]
    Client(redis_url).push_bulk({"job": "tests.leak", "args": [[m, 25, 0.3] for m in markers]})
    wait_until(lambda: store.scard("test:done") == 16, timeout=90, message="16 jobs done")
    exactly_once(store, markers)
    log = master.log()
    assert "over max_child_mb 150" in log and "recycling it (replacement first)" in log
    assert "died" not in log  # a recycle is not a crash
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=20) == 0


@pytest.mark.parametrize(("metric", "recycled"), [("uss", False), ("rss", True)])
def test_preloaded_shared_memory_counts_only_with_rss(
    metric: str, recycled: bool, run_jobmaster: Run, write_config: Write, store: redis.Redis
) -> None:
    config = write_config(
        processes=2,
        app=["tests.jobs", "tests.bigapp"],
        max_child_mb=200,
        memory_metric=metric,
        log_level="debug",
        **FAST,
    )
    master = run_jobmaster("-c", str(config))
    working_children(store, master, 2)
    if recycled:
        wait_until(
            lambda: f"({metric}), over max_child_mb 200: recycling" in master.log(),
            timeout=30,
            message="RSS counts the 400 MB shared with the master",
        )
    else:
        # Ten samples of each child, all under the limit: USS sees only its own pages.
        wait_until(lambda: master.log().count(f"MB {metric}") >= 20, timeout=30)
        assert "recycling" not in master.log()
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=20) == 0


def test_auto_limit_comes_from_the_container(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, tmp_path: Path
) -> None:
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    (cgroup / "memory.max").write_text(f"{2 * 2**30}\n")
    master = run_jobmaster(
        "-c", str(write_config(processes=2, max_child_mb="auto", cgroup_root=str(cgroup)))
    )
    working_children(store, master, 2)
    log = master.log()
    assert "max_child_mb auto: " in log and "of the container's 2048 MB, less " in log
    limit = int(log.split("max_child_mb auto: ", 1)[1].split(" MB", 1)[0])
    assert 700 < limit < 0.8 * 1024  # (2048 x 0.8 - the master) / 2
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=20) == 0


def test_the_container_guard_recycles_the_largest_child(
    run_jobmaster: Run,
    write_config: Write,
    store: redis.Redis,
    redis_url: str,
    tmp_path: Path,
) -> None:
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    (cgroup / "memory.max").write_text(f"{400 * 2**20}\n")
    master = run_jobmaster(
        "-c", str(write_config(processes=2, concurrency=1, cgroup_root=str(cgroup), **FAST))
    )
    working_children(store, master, 2)
    markers = [f"guard{n}" for n in range(12)]
    Client(redis_url).push_bulk({"job": "tests.leak", "args": [[m, 30, 0.3] for m in markers]})
    wait_until(lambda: store.scard("test:done") == 12, timeout=90)
    exactly_once(store, markers)
    wait_until(lambda: "(container guard at 90%): recycling it" in master.log(), timeout=10)
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=20) == 0


def test_max_jobs_per_child_recycles_through_the_same_path(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master = run_jobmaster("-c", str(write_config(processes=1, max_jobs_per_child=10)))
    first = working_children(store, master, 1)
    markers = [f"n{n}" for n in range(45)]
    Client(redis_url).push_bulk({"job": "tests.record", "args": [[m, 0.05] for m in markers]})
    wait_until(lambda: store.scard("test:done") == 45, timeout=60)
    exactly_once(store, markers)
    log = master.log()
    assert log.count(": recycling it (replacement first)") >= 3
    # Each child stops fetching at its limit (10 +- 10 %): never far beyond it.
    for line in log.splitlines():
        if "reached max_jobs_per_child (" in line and "jobs): finishing" in line:
            done = int(line.split("reached max_jobs_per_child (", 1)[1].split(" ", 1)[0])
            # 9 to 11, plus at most the other jobs already running (concurrency 3)
            assert 9 <= done <= 11 + 2, line
    assert working_children(store, master, 1) != first
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=20) == 0


def test_a_job_that_bloats_every_time_ends_in_the_dead_set(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str
) -> None:
    master = run_jobmaster(
        "-c",
        str(
            write_config(
                processes=1,
                max_child_mb=150,
                memory_check_interval=0.2,
                memory_grace=1,
                shutdown_timeout=1,
                max_crashes=2,
            )
        ),
    )
    working_children(store, master, 1)
    jid = Client(redis_url).push({"job": "tests.bloat", "args": ["fat", 250, 60]})
    wait_until(lambda: store.zcard(K.dead) == 1, timeout=60, message="the bloating job dead")
    [entry] = [json.loads(raw) for raw in store.zrange(K.dead, 0, -1)]
    assert entry["jid"] == jid
    assert entry["dead_reason"] == (
        "the worker process was recycled over its memory limit while running this job "
        "2 times: over max_child_mb 150 (uss)"  # the master's words: the limit it is over
    )
    assert int(store.hget("test:attempts", "fat") or 0) == 2
    assert store.llen(K.queue("default")) == 0
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=20) == 0


# -- in a real memory cgroup (tests/cgroup.py) ------------------------------------
CgroupMaker = Callable[[int], ScratchCgroup]
MB = 2**20


@pytest.mark.timeout(150)
@pytest.mark.parametrize("max_child_mb", ["auto", 150])
def test_children_leaking_20_mb_a_second_in_600_mb_never_meet_the_oom_killer(
    max_child_mb: str | int,
    run_jobmaster: Run,
    write_config: Write,
    store: redis.Redis,
    redis_url: str,
    memory_cgroup: CgroupMaker,
) -> None:
    """Issue 15's run, at the default memory_check_interval and memory_grace: 3
    children x 2 threads, 90 jobs that each keep 10 MB for good and take 1 s."""
    group = memory_cgroup(600 * MB)
    config = write_config(processes=3, concurrency=2, max_child_mb=max_child_mb)
    master = run_jobmaster("-c", str(config), cgroup=group)
    working_children(store, master, 3)
    markers = [f"leak{n}" for n in range(90)]
    Client(redis_url).push_bulk({"job": "tests.leak", "args": [[m, 10, 1.0] for m in markers]})
    wait_until(
        lambda: store.scard("test:done") == 90 or group.oom_kills() > 0,
        timeout=120,
        message="90 leaking jobs done",
    )
    log = master.log()
    assert group.oom_kills() == 0, f"the kernel OOM-killed in our cgroup:\n{log}"
    exactly_once(store, markers)
    assert "died" not in log and "memory kill" not in log
    assert "recycling it (replacement" in log
    if max_child_mb == "auto":
        assert "of the container's 600 MB, less " in log
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == 0


@pytest.mark.timeout(150)
def test_a_job_too_big_for_the_container_is_buried_by_jobmaster_not_the_kernel(
    run_jobmaster: Run,
    write_config: Write,
    store: redis.Redis,
    redis_url: str,
    memory_cgroup: CgroupMaker,
) -> None:
    """A job that would grow to 800 MB in a 600 MB cgroup, among innocent ones:
    each time jobmaster stops its child (the last line's kill, or a recycle
    that pushes it back for want of room) before the kernel's OOM killer acts;
    its neighbours are not counted against; after max_crashes it is dead."""
    group = memory_cgroup(600 * MB)
    config = write_config(processes=2, concurrency=2, max_crashes=2)
    master = run_jobmaster("-c", str(config), cgroup=group)
    working_children(store, master, 2)
    client = Client(redis_url)
    jid = client.push({"job": "tests.grow", "args": ["fat", 800, 50]})
    innocents = [f"innocent{n}" for n in range(30)]
    client.push_bulk({"job": "tests.record", "args": [[m, 0.5] for m in innocents]})
    wait_until(
        lambda: store.zcard(K.dead) == 1 or group.oom_kills() > 0,
        timeout=120,
        message="the job too big for the container in the dead set",
    )
    log = master.log()
    assert group.oom_kills() == 0, f"the kernel OOM-killed in our cgroup:\n{log}"
    [entry] = [json.loads(raw) for raw in store.zrange(K.dead, 0, -1)]
    assert entry["jid"] == jid
    killed = "was killed over the container's memory limit"
    recycled = "was recycled over its memory limit"
    assert any(
        entry["dead_reason"].startswith(
            f"the worker process {event} while running this job 2 times"
        )
        for event in (killed, recycled)
    ), entry["dead_reason"]
    # Counted twice; a third run at most, beside an innocent job, was not counted.
    assert int(store.hget("test:attempts", "fat") or 0) in (2, 3)
    assert "memory kill: child" in log or "no room to finish its jobs" in log
    wait_until(lambda: store.scard("test:done") == 30, timeout=30, message="every innocent done")
    assert store.hget("test:runs", "fat") is None
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == 0


@pytest.mark.timeout(120)
def test_the_last_line_kills_the_largest_child_when_it_cannot_leave_gracefully(
    run_jobmaster: Run,
    write_config: Write,
    store: redis.Redis,
    redis_url: str,
    memory_cgroup: CgroupMaker,
) -> None:
    """A child that cannot act on its recycle request (SIGSTOPped here; a child
    stuck in C code would not read it either) holds 300 MB while its sibling
    grows: the master
    SIGKILLs it, the largest, before the kernel would pick a victim of its own,
    and requeues its job blamed as a memory kill (it ran alone: counted)."""
    group = memory_cgroup(600 * MB)
    config = write_config(processes=2, concurrency=1, max_crashes=3)
    master = run_jobmaster("-c", str(config), cgroup=group)
    working_children(store, master, 2)
    client = Client(redis_url)
    held = client.push({"job": "tests.grow", "args": ["held", 300, 100, 60]})
    wait_until(lambda: store.sismember("test:grown", "held"), timeout=30)
    stuck = inprogress_owner(store, held)
    assert stuck is not None
    os.kill(stuck, signal.SIGSTOP)
    client.push({"job": "tests.grow", "args": ["growing", 260, 50]})
    wait_until(
        lambda: "memory kill: child" in master.log() or group.oom_kills() > 0,
        timeout=60,
        message="the last line's kill",
    )
    log = master.log()
    assert group.oom_kills() == 0, f"the kernel OOM-killed in our cgroup:\n{log}"
    assert f"(pid {stuck}), the largest (" in log
    wait_until(lambda: int(store.hget("test:attempts", "held") or 0) == 2, timeout=30)
    [payload] = [p for p in all_inprogress(store) if p["jid"] == held]
    assert payload["crash_count"] == 1
    assert payload["crash_cause"].startswith("container memory at ")
    assert group.oom_kills() == 0
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == 0


def all_inprogress(store: redis.Redis) -> list[dict[str, object]]:
    return [
        json.loads(raw)
        for key in store.scan_iter(match=K.inprogress("*"))
        for raw in store.lrange(key, 0, -1)
    ]


@pytest.mark.timeout(60)
def test_check_ps_and_the_heartbeat_show_the_limit_where_it_was_found(
    run_jobmaster: Run,
    write_config: Write,
    store: redis.Redis,
    redis_url: str,
    memory_cgroup: CgroupMaker,
) -> None:
    group = memory_cgroup(600 * MB)
    config = write_config(processes=2, max_child_mb="auto")
    env = {**os.environ, "JOBMASTER_REDIS_URL": redis_url}
    checked = subprocess.run(
        group.wrap([jobmaster_command(), "check", "-c", str(config)]),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
    [line] = [x for x in checked.stdout.splitlines() if x.startswith("memory:")]
    limit_file = "memory.max" if group.version == 2 else "memory.limit_in_bytes"
    assert f"container limit 600 MB (cgroup v{group.version} {group.path}/{limit_file})" in line
    assert "max_child_mb auto: about " in line
    master = run_jobmaster("-c", str(config), cgroup=group)
    working_children(store, master, 2)
    key = K.heartbeat(f"*:{master.pid}:*")

    def master_beat() -> dict[bytes, bytes]:
        for found in store.scan_iter(match=key):
            return store.hgetall(found)
        return {}

    wait_until(lambda: float(master_beat().get(b"memory_used_mb", 0)) > 0, timeout=20)
    assert float(master_beat()[b"memory_limit_mb"]) == 600.0
    listed = subprocess.run(
        [jobmaster_command(), "ps", "-c", str(config)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    [row] = [x for x in listed.stdout.splitlines() if f" {master.pid} " in x]
    assert " master " in row and "/600 MB (" in row
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == 0
