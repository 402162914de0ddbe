"""Measuring processes' memory (psutil), for the master and for heartbeats.

A child's memory is its whole process tree (SPEC §9): a job's subprocess
holds memory the child's own numbers do not show, and one started in a
session of its own (``start_new_session=True``) is outside the child's
process group too. ``Descendants`` finds each child's tree by parent pid,
one scan of the process table per sample for all children (what psutil's
``children(recursive=True)`` does per call), and *records* every
descendant it has seen: a subprocess whose parent exits is re-parented
(to init, or a subreaper) and no parent chain leads to the child any
more, but it is still the child's doing. A recorded process is known by
pid and start time (psutil.Process), so a reused pid is never taken for
it, nor signalled. What starts and is orphaned between two samples is
missed; its memory is then in the cgroup's "rest", which the master
reports rather than blames on a child.
"""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import psutil

MB = 1024 * 1024


def measure_mb(pid: int, metric: str) -> float | None:
    """The process's memory in MB by ``metric`` (uss, pss, rss); None if it is gone.

    USS and PSS read /proc/PID/smaps_rollup (a few milliseconds): fine every
    few seconds, not per job.
    """
    try:
        process = psutil.Process(pid)
        if metric == "rss":
            return float(process.memory_info().rss) / MB
        info = process.memory_full_info()
        return float(getattr(info, metric)) / MB
    except (psutil.Error, AttributeError):
        return None


class Descendants:
    """Every root's descendants, found by parent pid and recorded once seen."""

    def __init__(self) -> None:
        self.known: dict[int, dict[int, psutil.Process]] = {}  # root -> pid -> process

    def update(self, roots: Iterable[int]) -> dict[int, list[int]]:
        """Each root's descendants now (pids), from one scan of the process table.
        Roots not named are forgotten (their processes are not signalled)."""
        roots = list(roots)
        children: dict[int, list[int]] = defaultdict(list)
        for pid, parent in _parents():
            children[parent].append(pid)
        for root in list(self.known):
            if root not in roots:
                del self.known[root]
        found = {}
        for root in roots:
            known = self.known.setdefault(root, {})
            for pid, process in list(known.items()):
                if not _alive(process):
                    del known[pid]
            stack = [root, *known]
            while stack:
                for pid in children.get(stack.pop(), ()):
                    if pid != root and pid not in known:
                        with contextlib.suppress(psutil.Error):
                            known[pid] = psutil.Process(pid)
                            stack.append(pid)
            found[root] = list(known)
        return found

    def kill(self, root: int) -> list[int]:
        """SIGKILL the root's recorded descendants still alive (never a reused
        pid: psutil checks the start time); forgets them. Returns the pids."""
        killed = []
        for pid, process in self.known.pop(root, {}).items():
            with contextlib.suppress(psutil.Error):
                process.kill()
                killed.append(pid)
        return killed


def _parents() -> list[tuple[int, int]]:
    """(pid, parent pid) of every live process (zombies left out).

    /proc/PID/stat read directly where there is one: psutil's process_iter
    took 44 ms for 130 processes on a busy 2-core machine, the master's
    loop does this at every sample (every 200 ms near a container's limit),
    and this takes a few. psutil elsewhere.
    """
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        found = []
        with contextlib.suppress(psutil.Error, OSError):
            for process in psutil.process_iter(["ppid", "status"]):
                parent, status = process.info.get("ppid"), process.info.get("status")
                if isinstance(parent, int) and status != psutil.STATUS_ZOMBIE:
                    found.append((process.pid, parent))
        return found
    found = []
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as file:
                stat = file.read()
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split(b" ", 2)
        if len(fields) >= 2 and fields[0] != b"Z" and fields[1].isdigit():
            found.append((int(entry.name), int(fields[1])))
    return found


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
