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

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
PID_NAMESPACE = Path("/proc/self/ns/pid")
PROC = Path("/proc")
PID_MAX = 2**22  # Linux's largest pid_max


def beat_interval(ttl: float) -> float:
    """Seconds between two heartbeats: three chances to beat within ``ttl``,
    so one slow round never makes a live process look dead (and its jobs
    orphans); at most 5 s, so an idle process costs Redis little."""
    return max(0.5, min(5.0, ttl / 3))


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


def _stat(pid: int) -> tuple[str, int] | None:
    """The process's state letter and start time, in clock ticks since boot,
    from /proc/PID/stat; None if there is no such process.

    Ticks since boot, not a wall-clock time: a clock stepped by NTP moves
    every wall-clock start time computed from it, and a live process would
    then look like another one under a reused pid.
    """
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    try:
        return fields[0], int(fields[19])  # state, starttime
    except (IndexError, ValueError):
        return None


def started_at(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None if unknown."""
    found = _stat(pid)
    return found[1] if found is not None else None


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
    pid, started = _number(heartbeat, "pid"), _number(heartbeat, "pid_started")
    if pid is None or started is None or not _gone(pid, started):
        return False
    if "master_pid" not in heartbeat:
        return True  # a ``jobmaster worker``: nobody else will requeue it
    master, master_started = _number(heartbeat, "master_pid"), _number(heartbeat, "master_started")
    return master is not None and master_started is not None and _gone(master, master_started)


def _number(heartbeat: Mapping[str, str], name: str) -> int | None:
    """A field read from Redis, as a whole number from 1; None if it is anything
    else (then the process is not judged). A pid of 0 or below is a process
    *group* to ``kill`` (-1: every process), never a worker."""
    text = heartbeat.get(name)
    if text is None or not text.isascii() or not text.isdigit():
        return None
    value = int(text[:40])  # bounded: a 100 MB "number" is not parsed whole
    return value if value >= 1 else None


def _gone(pid: int, started: int) -> bool:
    """The process ``pid`` that started at ``started`` (ticks) no longer runs:
    no such pid, a zombie (exited, not yet reaped) or another process.

    Asked of the kernel first: /proc may hide other users' processes
    (``hidepid``), and a process we cannot see is not a process that died.
    """
    if pid > PID_MAX:
        return True  # no process of this machine can have it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists, as another user
    found = _stat(pid)
    if found is None:
        return False  # there, but unreadable (or gone this instant): don't know
    state, ticks = found
    return state == "Z" or ticks != started
