"""Whether a worker process that still has a heartbeat is provably dead.

A heartbeat is the only sign of life another host can read, so a process
that dies without clearing its own (SIGKILL, OOM kill) counts as alive until
the heartbeat expires (``heartbeat_ttl``, 60 s by default). Its master
requeues its jobs at once, in the pass that reaps it; but a master killed
before that pass (a crash right after the child's, a node's OOM killer
taking both) leaves the child's jobs to wait out the TTL.

On the same machine we can do better without guessing: each heartbeat
carries where its process lives (``locus``: the kernel's boot id and the
pid namespace) and when it and its master started. A process of *our*
locus whose pid is gone, a zombie, or a different process (another start
time) is dead. Its list is ours to requeue only if its master is dead too:
a live master requeues its own dead child's list, and counts the crash
against each job (poison pills), which a sibling's scan must not pre-empt.
Anything else, including a process on another host, in another container's
pid namespace (even one that shares our hostname, as host-networked
containers do) or on a machine without /proc, is left to its heartbeat's
TTL: never a live worker's jobs requeued.
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


def started_at(pid: int) -> float | None:
    """The process's start time (unix seconds), as the kernel keeps it; None
    if there is no such process."""
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def provably_dead(heartbeat: Mapping[str, str]) -> bool:
    """True only if the heartbeat's process ran here (our locus) and is gone,
    and so is its master, if it had one.

    ``heartbeat`` holds its ``locus``, ``pid`` and ``pid_started`` fields,
    and a child's ``master_pid`` and ``master_started``; one missing (an older
    version's heartbeat) means "don't know": False.
    """
    here = locus()
    if not here or heartbeat.get("locus") != here:
        return False
    try:
        if not _gone(int(heartbeat["pid"]), float(heartbeat["pid_started"])):
            return False
        if "master_pid" not in heartbeat:
            return True  # a ``jobmaster worker``: nobody else will requeue it
        return _gone(int(heartbeat["master_pid"]), float(heartbeat["master_started"]))
    except (KeyError, ValueError):
        return False


def _gone(pid: int, started: float) -> bool:
    """The process ``pid`` that started at ``started`` no longer runs."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return True  # exited, not yet reaped
        return abs(process.create_time() - started) > START_TOLERANCE  # pid reused
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # e.g. AccessDenied: alive, as far as we can tell
        return False
