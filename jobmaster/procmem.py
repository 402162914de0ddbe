"""Measuring one process's memory (psutil), for the master and for heartbeats."""

from __future__ import annotations

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
