"""CPU seconds of a worker pool's process tree and of the Redis server, with psutil.

Used by the drivers (psutil is installed into every peer's venv beside the
peer). A process's CPU is its own user + system time plus that of the
children it has reaped (``children_user``, ``children_system``), so a tree's
sum counts a process that exited during the measure (RQ's work horse, a
recycled child) once it was reaped by its parent, and never twice: a live
process's time is in no one's ``children_*`` until it is reaped.
"""

from __future__ import annotations

import contextlib

import psutil


def process_cpu(process: psutil.Process) -> float:
    t = process.cpu_times()
    return float(t.user + t.system + t.children_user + t.children_system)


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and of every live descendant (0 for one that vanished)."""
    total = 0.0
    with contextlib.suppress(psutil.NoSuchProcess):
        root = psutil.Process(pid)
        for process in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
                total += process_cpu(process)
    return total


def pid_cpu(pid: int) -> float:
    """CPU seconds of one process (the Redis server: ``INFO server`` names its pid)."""
    return process_cpu(psutil.Process(pid))
