"""Whether a worker process that still has a heartbeat is provably dead.

A heartbeat is the only sign of life another host can read, so a process
that dies without clearing its own (SIGKILL, OOM kill) counts as alive until
the heartbeat expires (``heartbeat_ttl``, 60 s by default). Its master
requeues its jobs at once, in the pass that reaps it; but a master killed
before that pass (a crash right after the child's, a node's OOM killer
taking both) leaves the child's jobs to wait out the TTL.

On the same machine we can do better without guessing: each heartbeat
carries where its process lives (``locus``: the kernel's boot id and the
pid namespace) and when it started. A process of *our* locus whose pid is
gone, a zombie, or a different process (another start time) is dead, and
its list can be requeued at once. Anything else, including a process on
another host, in another container's pid namespace (even one that shares
our hostname, as host-networked containers do) or on a machine without
/proc, is left to its heartbeat's TTL: never a live worker's jobs requeued.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path

import psutil

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
PID_NAMESPACE = Path("/proc/self/ns/pid")
START_TOLERANCE = 0.05  # seconds: the same process reads the same start time


@functools.cache
def locus() -> str:
    """``BOOT_ID/PIDNS`` of this machine and pid namespace, or "" where Linux's
    /proc doesn't tell (then no process is ever judged dead here)."""
    try:
        boot = BOOT_ID.read_text().strip()
        namespace = os.stat(PID_NAMESPACE).st_ino
    except OSError:
        return ""
    return f"{boot}/{namespace}" if boot else ""


def started_at(pid: int) -> float:
    """The process's start time (unix seconds), as the kernel keeps it."""
    return float(psutil.Process(pid).create_time())


def provably_dead(heartbeat: Mapping[str, str]) -> bool:
    """True only if the heartbeat's process ran here (our locus) and is gone.

    ``heartbeat`` holds its ``locus``, ``pid`` and ``pid_started`` fields;
    one missing (an older version's heartbeat) means "don't know": False.
    """
    here = locus()
    if not here or heartbeat.get("locus") != here:
        return False
    try:
        pid, started = int(heartbeat["pid"]), float(heartbeat["pid_started"])
    except (KeyError, ValueError):
        return False
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return True  # exited, not yet reaped
        return abs(process.create_time() - started) > START_TOLERANCE  # pid reused
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # e.g. AccessDenied: alive, as far as we can tell
        return False
