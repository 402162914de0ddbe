"""Jobs for the recycling and container-memory tests: who ran them, and
memory held where a child's own numbers do not show it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import jobmaster
from tests.jobs import record, store

SHM = Path("/dev/shm")


@jobmaster.job(name="tests.ran_by")
def ran_by(marker: str, seconds: float = 0.0) -> None:
    """Records which process ran it (and how often), then ``record``'s marks."""
    store().hset("test:ran_by", marker, os.getpid())
    store().hincrby("test:attempts", marker, 1)
    record.func(marker, seconds)


@jobmaster.job(name="tests.shm_hog")
def shm_hog(marker: str, megabytes: int, name: str) -> None:
    """Writes a tmpfs file of ``megabytes`` and ends: memory the cgroup counts
    and no process holds (a cache, a Unix socket's file, a careless job)."""
    with (SHM / name).open("wb") as file:
        for _ in range(megabytes):
            file.write(b"x" * 2**20)
    record.func(marker)


GROW_IN_PYTHON = """
import sys, time
held = []
for _ in range(int(sys.argv[1]) // 10):
    held.append(b"x" * (10 * 2**20))
    time.sleep(10 / float(sys.argv[2]))
time.sleep(600)
"""


@jobmaster.job(name="tests.session_hog")
def session_hog(marker: str, megabytes: int, per_second: float) -> None:
    """Starts a subprocess in a session of its own that grows to ``megabytes``
    and waits on it: the child's own size stays small while its tree grows."""
    store().hincrby("test:attempts", marker, 1)
    grower = subprocess.Popen(
        [sys.executable, "-c", GROW_IN_PYTHON, str(megabytes), str(per_second)],
        start_new_session=True,
    )
    store().set(f"test:subprocess:{marker}", grower.pid)
    grower.wait()
    record.func(marker)


@jobmaster.job(name="tests.hold")
def hold(marker: str, megabytes: int, seconds: float) -> None:
    """Holds ``megabytes`` for ``seconds``, counting its attempts: an innocent
    job with a working set of its own."""
    store().hincrby("test:attempts", marker, 1)
    block = b"x" * (megabytes * 2**20)
    store().sadd("test:holding", marker)
    time.sleep(seconds)
    assert block
    record.func(marker)
