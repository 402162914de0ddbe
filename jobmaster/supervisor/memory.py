"""The memory killer's measurements and decisions (the master acts on them).

Why USS by default: with ``preload`` the children share the master's pages
copy-on-write. RSS (and, in part, PSS) counts those shared pages in every
child, so a 400 MB preloaded app makes each child "400 MB" while killing it
would free almost nothing. USS is what a child's death would give back.

Why three samples in a row: a job that briefly holds a big buffer should
not cost its child a recycle; a child that stays over its limit should.

Why a container guard: the kernel OOM killer picks its victim by its own
rules, possibly the master. When a container limit is known, the master
recycles the largest child first, once the children reach 90 % of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from jobmaster.procmem import MB, measure_mb

__all__ = ["MB", "MemoryWatch", "auto_limit_mb", "container_limit_bytes", "measure_mb"]

CONSECUTIVE = 3  # samples in a row over the limit before a recycle
GUARD_FRACTION = 0.9
HEADROOM = 0.9  # "auto" leaves 10 % of each child's share unused
UNLIMITED = 2**60  # cgroup v1 writes a huge number for "no limit"


def container_limit_bytes(cgroup_root: str) -> int | None:
    """The memory limit of our cgroup: v2 ``memory.max``, else v1
    ``memory/memory.limit_in_bytes``; None when unlimited or unknown."""
    root = Path(cgroup_root)
    for path in (root / "memory.max", root / "memory" / "memory.limit_in_bytes"):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max" or not text.isdigit():
            return None
        value = int(text)
        return value if 0 < value < UNLIMITED else None
    return None


def auto_limit_mb(limit_bytes: int, master_bytes: int, processes: int) -> int:
    """Each child's share of what the container leaves after the master, less 10 %."""
    share = (limit_bytes - master_bytes) / max(1, processes)
    return max(1, int(share * HEADROOM / MB))


@dataclass
class MemoryWatch:
    """Decides, from samples, which children to recycle."""

    limit_mb: float  # per child; 0 = off
    container_mb: float | None = None  # the container's limit, for the guard
    over: dict[int, int] = field(default_factory=dict)  # pid -> samples in a row over

    def over_limit(self, sizes: dict[int, float]) -> list[tuple[int, float]]:
        """Children over the limit for CONSECUTIVE samples in a row: (pid, MB)."""
        for pid in list(self.over):
            if pid not in sizes:
                del self.over[pid]  # gone, or no longer measured
        if not self.limit_mb:
            return []
        found = []
        for pid, size in sizes.items():
            self.over[pid] = self.over.get(pid, 0) + 1 if size > self.limit_mb else 0
            if self.over[pid] >= CONSECUTIVE:
                found.append((pid, size))
                self.over[pid] = 0
        return found

    def guard(self, sizes: dict[int, float]) -> tuple[int, float] | None:
        """The largest child, if all together reach GUARD_FRACTION of the container."""
        if not self.container_mb or not sizes:
            return None
        if sum(sizes.values()) < GUARD_FRACTION * self.container_mb:
            return None
        pid = max(sizes, key=lambda p: sizes[p])
        return pid, sizes[pid]
