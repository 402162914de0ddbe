"""The container's last line blames only the guilty, in a real memory cgroup
(SPEC §9): memory held by a tmpfs file, by a process that is no child, or by
a job's subprocess in a session of its own is told apart from the children's
growth; no innocent job is killed or buried, the kernel OOM-kills nothing,
and every memory kill frees what it was for."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import redis

from jobmaster.client import Client
from jobmaster.keys import Keys
from tests.cgroup import ScratchCgroup
from tests.helpers import holds_for, wait_until
from tests.process.conftest import JobmasterProcess
from tests.process.test_master import working_children

pytestmark = pytest.mark.process
K = Keys()
MB = 2**20
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]
CgroupMaker = Callable[[int], ScratchCgroup]
APP = ["tests.jobs", "tests.recycle_jobs"]
NOT_OURS = "but not by the children's growth"
FREED_LITTLE = "the last memory kill freed"


def attempts(store: redis.Redis, marker: str) -> int:
    return int(store.hget("test:attempts", marker) or 0)


def innocent_size(group: ScratchCgroup, share: float = 0.97) -> int:
    """MB an innocent job must hold to take the group's usage to ``share`` of
    its limit (past the last line at 95 %, short of the kernel's OOM kill)."""
    limit = int((group.path / "memory.limit_in_bytes").read_text())
    megabytes = int((share * limit - group.usage()) / MB)
    assert 30 <= megabytes <= 150, f"{megabytes} MB: the rest does not fill the group as meant"
    return megabytes


def blameless(store: redis.Redis, master: JobmasterProcess, group: ScratchCgroup) -> str:
    """The run's verdict: no OOM kill, nothing dead, no memory kill."""
    log = master.log()
    assert group.oom_kills() == 0, f"the kernel OOM-killed in our cgroup:\n{log}"
    assert store.zcard(K.dead) == 0, store.zrange(K.dead, 0, -1)
    assert "memory kill: child" not in log and "died" not in log, log
    return log


@pytest.fixture
def shm_file() -> Iterator[str]:
    name = f"jobmaster-test-{uuid.uuid4().hex[:12]}"
    yield name
    with contextlib.suppress(FileNotFoundError):
        (Path("/dev/shm") / name).unlink()


@pytest.mark.timeout(150)
def test_a_tmpfs_file_is_the_rests_not_the_innocent_job_beside_it(
    run_jobmaster: Run,
    write_config: Write,
    store: redis.Redis,
    redis_url: str,
    memory_cgroup: CgroupMaker,
    shm_file: str,
) -> None:
    """Hole 4 (b): a job wrote 450 MB to /dev/shm and ended; an innocent job
    holding 80 MB was then killed three times and buried as a poison pill."""
    group = memory_cgroup(600 * MB)
    config = write_config(app=APP, processes=2, concurrency=1)
    master = run_jobmaster("-c", str(config), cgroup=group)
    working_children(store, master, 2)
    client = Client(redis_url)
    client.push({"job": "tests.shm_hog", "args": ["hog", 380, shm_file]})
    wait_until(lambda: store.sismember("test:done", "hog"), timeout=60, message="tmpfs written")
    client.push({"job": "tests.hold", "args": ["innocent", innocent_size(group), 15]})
    wait_until(
        lambda: NOT_OURS in master.log() or group.oom_kills() > 0,
        timeout=60,
        message="the master says what holds the memory",
    )
    wait_until(
        lambda: store.sismember("test:done", "innocent") or group.oom_kills() > 0, timeout=60
    )
    log = blameless(store, master, group)
    assert attempts(store, "innocent") == 1
    [line] = [line for line in log.splitlines() if NOT_OURS in line][:1]
    assert "tmpfs/shm files 3" in line, line  # 380 MB, as the cgroup counts it
    assert "recycling it" not in log
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == 0


SIDECAR = """
import sys, time
held = [b"x" * (10 * 2**20) for _ in range(int(sys.argv[1]) // 10)]
open(sys.argv[2], "w").write("up")
time.sleep(600)
"""


@pytest.mark.timeout(150)
def test_usage_held_high_by_a_process_that_is_no_child_blames_no_child(
    run_jobmaster: Run,
    write_config: Write,
    store: redis.Redis,
    redis_url: str,
    memory_cgroup: CgroupMaker,
    tmp_path: Path,
) -> None:
    """A sidecar in the same container grows to 380 MB after the start: the
    children's innocent jobs run once each; the log names the sidecar."""
    group = memory_cgroup(600 * MB)
    config = write_config(app=APP, processes=2, concurrency=1)
    master = run_jobmaster("-c", str(config), cgroup=group)
    working_children(store, master, 2)
    up = tmp_path / "sidecar-up"
    sidecar = subprocess.Popen(
        group.wrap([sys.executable, "-c", SIDECAR, "380", str(up)]), start_new_session=True
    )
    try:
        wait_until(up.exists, timeout=30, message="the sidecar holds its memory")
        client = Client(redis_url)
        client.push({"job": "tests.hold", "args": ["innocent", innocent_size(group), 15]})
        client.push({"job": "tests.hold", "args": ["beside", 10, 15]})
        wait_until(
            lambda: NOT_OURS in master.log() or group.oom_kills() > 0,
            timeout=60,
            message="the master says what holds the memory",
        )
        wait_until(
            lambda: store.scard("test:done") == 2 or group.oom_kills() > 0,
            timeout=60,
            message="both innocent jobs done",
        )
        log = blameless(store, master, group)
        assert attempts(store, "innocent") == attempts(store, "beside") == 1
        [line] = [line for line in log.splitlines() if NOT_OURS in line][:1]
        assert f"pid {sidecar.pid} " in line, line  # the largest other process, named
    finally:
        sidecar.kill()
        sidecar.wait(timeout=10)
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == 0


@pytest.mark.timeout(180)
def test_a_jobs_subprocess_in_its_own_session_is_its_childs_memory(
    run_jobmaster: Run,
    write_config: Write,
    store: redis.Redis,
    redis_url: str,
    memory_cgroup: CgroupMaker,
) -> None:
    """Hole 4 (b): a subprocess started with start_new_session=True grew to
    540 MB while the master SIGKILLed the *other* child. Its child is measured
    with it: that child is stopped (the subprocess with it), its job blamed
    until dead; the innocent job beside it runs once; no OOM kill."""
    group = memory_cgroup(600 * MB)
    config = write_config(app=APP, processes=2, concurrency=1, max_crashes=2, shutdown_timeout=2)
    master = run_jobmaster("-c", str(config), cgroup=group)
    working_children(store, master, 2)
    client = Client(redis_url)
    client.push({"job": "tests.hold", "args": ["innocent", 60, 40]})
    wait_until(lambda: store.sismember("test:holding", "innocent"), timeout=30)
    hog = client.push({"job": "tests.session_hog", "args": ["hog", 540, 50]})
    wait_until(
        lambda: store.zcard(K.dead) == 1 or group.oom_kills() > 0,
        timeout=150,
        message="the job whose subprocess grows, dead",
    )
    log = master.log()
    assert group.oom_kills() == 0, f"the kernel OOM-killed in our cgroup:\n{log}"
    [entry] = [json.loads(raw) for raw in store.zrange(K.dead, 0, -1)]
    assert entry["jid"] == hog
    assert attempts(store, "hog") == 2
    assert FREED_LITTLE not in log  # every memory kill freed what it was for
    # Its subprocess went with its child: none is left growing in the group.
    grower = int(store.get("test:subprocess:hog") or 0)
    wait_until(
        lambda: (
            not psutil.pid_exists(grower) or psutil.Process(grower).status() == psutil.STATUS_ZOMBIE
        ),
        timeout=15,
        message="the last subprocess gone",
    )
    wait_until(lambda: store.sismember("test:done", "innocent"), timeout=60)
    assert attempts(store, "innocent") == 1
    holds_for(1.0, lambda: group.oom_kills() == 0)
    assert os.getpid() not in group.pids()
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == 0
