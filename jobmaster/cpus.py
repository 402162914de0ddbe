"""How many CPUs this process may really use: the default of ``processes``.

``os.cpu_count()`` reports the host's CPUs, so a container limited to two
CPUs on a 64-core host would fork 64 children that fight over two CPUs and
each hold their own memory. We read the CPU affinity mask (taskset, cpusets)
and the cgroup CPU quota (Docker ``--cpus``, Kubernetes ``limits.cpu``).
"""

from __future__ import annotations

import math
import os
from pathlib import Path


def usable_cpus(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """CPUs allowed by the affinity mask, capped by the cgroup quota; at least 1."""
    count = _affinity_cpus()
    quota = _cgroup_cpu_quota(Path(cgroup_root))
    if quota is not None:
        count = min(count, quota)
    return max(1, count)


def _affinity_cpus() -> int:
    # sched_getaffinity is Linux-only; elsewhere the host count is the best we know.
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _cgroup_cpu_quota(root: Path) -> int | None:
    """The quota in whole CPUs, rounded up (1.5 CPUs of time keeps 2 busy), or None.

    Inside a container the cgroup namespace makes ``root`` the container's own
    group, which is where the runtime writes the limit.
    """
    v2 = _read(root / "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        return _ratio(quota, period)
    for folder in ("cpu", "cpu,cpuacct"):  # where distributions mount cgroup v1
        quota_us = _read(root / folder / "cpu.cfs_quota_us")
        period_us = _read(root / folder / "cpu.cfs_period_us")
        if quota_us is not None and period_us is not None:
            return _ratio(quota_us, period_us)
    return None


def _ratio(quota: str, period: str) -> int | None:
    # v2 writes "max" and v1 writes -1 for "no limit".
    try:
        quota_value, period_value = int(quota), int(period)
    except ValueError:
        return None
    if quota_value <= 0 or period_value <= 0:
        return None
    return max(1, math.ceil(quota_value / period_value))


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None
