"""Running the real ``jobmaster`` command as a subprocess, in its own session.

Each process gets its own process group so that a test can signal the whole
group (as a terminal would). The master puts each child in a group of its
own, so teardown finds the whole tree by an environment tag that every
descendant inherits, and kills it: no worker outlives its test.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import psutil
import pytest
import redis

from jobmaster.keys import Keys
from tests.cgroup import ScratchCgroup, Unavailable, make
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
K = Keys()
TAG = "JOBMASTER_TEST_TAG"


def jobmaster_command() -> str:
    found = shutil.which("jobmaster", path=str(Path(sys.executable).parent))
    assert found, "the jobmaster console script is not installed in this environment"
    return found


@dataclass
class JobmasterProcess:
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        self.popen.send_signal(signum)

    def signal_group(self, signum: int) -> None:
        assert self.popen.poll() is None, "signalling the group of an exited process"
        os.killpg(self.popen.pid, signum)

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout=timeout)


def toml_value(value: object) -> str:
    """A TOML value: JSON's spelling of strings, lists and tables is valid TOML for these."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | list):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    return str(value)


@pytest.fixture
def write_config(tmp_path: Path, redis_url: str) -> Callable[..., Path]:
    """A TOML config on the test's Redis; keyword arguments add or replace keys."""

    def write(periodic: dict[str, dict[str, object]] | None = None, **settings: object) -> Path:
        """``periodic={"NAME": {"every": 1, ...}}`` adds ``[periodic.NAME]`` tables."""
        values: dict[str, object] = {
            "app": ["tests.jobs"],
            "redis_url": redis_url,
            "concurrency": 3,
            "poll_interval": 0.2,
            "shutdown_timeout": 5,
            **settings,
        }
        lines = [f"{key} = {toml_value(value)}" for key, value in values.items()]
        for name, table in (periodic or {}).items():
            lines.append(f"\n[periodic.{name}]")
            lines += [f"{key} = {toml_value(value)}" for key, value in table.items()]
        path = tmp_path / f"jobmaster-{len(list(tmp_path.glob('*.toml')))}.toml"
        path.write_text("\n".join(lines) + "\n")
        return path

    return write


@pytest.fixture
def run_jobmaster(tmp_path: Path, redis_url: str) -> Iterator[Callable[..., JobmasterProcess]]:
    """Start ``jobmaster ARGS`` from the repo root (so ``tests.jobs`` imports)."""
    started: list[JobmasterProcess] = []

    tag = uuid.uuid4().hex

    def start(
        *args: str, env: dict[str, str] | None = None, cgroup: ScratchCgroup | None = None
    ) -> JobmasterProcess:
        """``cgroup``: start it inside that memory cgroup (tests/cgroup.py)."""
        log_path = tmp_path / f"jobmaster-{len(started)}.log"
        environment = {**os.environ, "JOBMASTER_REDIS_URL": redis_url, TAG: tag, **(env or {})}
        command = [jobmaster_command(), *args]
        with log_path.open("wb") as log_file:
            popen = subprocess.Popen(
                cgroup.wrap(command) if cgroup is not None else command,
                cwd=ROOT,
                env=environment,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process = JobmasterProcess(popen, log_path)
        started.append(process)
        return process

    yield start
    # By descent first: a long process title overwrites the environment block
    # that the tag is read from, so a child that renamed itself can hide from
    # tagged(). Missed, it would go on taking the next test's jobs from the
    # session's Redis.
    doomed = {p.pid: p for p in tagged(tag)}
    for process in started:
        if process.popen.poll() is None:
            with contextlib.suppress(psutil.Error):
                doomed.update((c.pid, c) for c in psutil.Process(process.pid).children(True))
    for victim in doomed.values():
        with contextlib.suppress(psutil.Error):
            victim.kill()
    for process in started:
        if process.popen.poll() is None:  # a reaped pid's group id may be reused
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        process.popen.wait(timeout=10)
    # Last, whatever still talks to the session's Redis: a child of a master
    # that exited, renamed (so no tag) and reparented (so no descendant), was
    # seen taking the next test's jobs in the seconds before it noticed its
    # master was gone (a batch's poison pill ran in no process of that test).
    port = urlparse(redis_url).port
    wait_until(lambda: not _kill_clients_of(port), timeout=10, message="clients left")


def _kill_clients_of(port: int | None) -> list[int]:
    """SIGKILL every process with a TCP connection to ``port`` (this session's
    private Redis) that is no longer ours: a descendant of this process (a
    dashboard server a module shares) is left alone; a child whose master
    exited has been reparented away from us. Its pids, empty when none is left."""
    ours = {os.getpid(), *(p.pid for p in psutil.Process().children(recursive=True))}
    pids = {
        conn.pid
        for conn in psutil.net_connections(kind="tcp")
        if conn.raddr and conn.raddr.port == port and conn.pid is not None and conn.pid not in ours
    }
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    return sorted(pids)


def tagged(tag: str) -> list[psutil.Process]:
    """Every live process started by one test (children of a dead master included)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.environ().get(TAG) == tag and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


@pytest.fixture
def store(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


def wait_for_worker(store: redis.Redis, process: JobmasterProcess, timeout: float = 20) -> str:
    """Wait until the process has a heartbeat; returns its identity."""
    found: list[str] = []

    def has_heartbeat() -> bool:
        assert process.popen.poll() is None, f"jobmaster exited early:\n{process.log()}"
        for key in store.scan_iter(match=K.heartbeat("*")):
            if int(store.hget(key, "pid") or 0) == process.pid:
                found.append(key.decode().rsplit("heartbeat:", 1)[1])
                return True
        return False

    wait_until(has_heartbeat, timeout=timeout, message="worker heartbeat")
    return found[0]


@pytest.fixture
def memory_cgroup() -> Iterator[Callable[[int], ScratchCgroup]]:
    """Make real memory cgroups (``memory_cgroup(limit_bytes)``), skipping the test
    with the reason where none can be made; each is emptied and removed after."""
    made: list[ScratchCgroup] = []

    def create(limit_bytes: int) -> ScratchCgroup:
        try:
            group = make(limit_bytes)
        except Unavailable as why:
            pytest.skip(str(why))
        made.append(group)
        return group

    yield create
    for group in made:
        group.destroy()
