"""Which memory cgroup the kernel charges us to, its limit, and what it counts.

Why not the mount root. The kernel applies a memory limit to the cgroup a
process is *in*, and to each of its ancestors. Reading ``memory.max`` at
the root of the cgroup mount is right only inside a container with its own
cgroup namespace (Docker, Kubernetes), where the container's group is shown
as the root. Under systemd's ``MemoryMax=`` (the unit's group is
``/system.slice/jobmaster.service``), in a nested group, or in a container
without a cgroup namespace, the root says "max" while the kernel OOM-kills
at the real limit. So:

- ``/proc/self/cgroup`` names our group: the v1 line whose controllers
  include ``memory``, else the v2 line ``0::PATH`` (a controller is bound to
  one hierarchy only, so on a hybrid host the v1 line wins).
- ``/proc/self/mountinfo`` says where that hierarchy is mounted and which
  of its groups the mount shows as its root: a container without a cgroup
  namespace gets its own group bind-mounted there, so PATH is taken relative
  to the mount's root. A PATH outside the mount (``/..``, a namespace whose
  root is below us) or a folder that is not there: the mount point itself,
  which is then our group (the namespace-root case).
- The limit is the tightest one from our group up to the mount point (v2
  ``memory.max``, v1 ``memory.limit_in_bytes``); v1 also reports in
  ``memory.stat`` the ``hierarchical_memory_limit`` of ancestors we cannot
  see. The group whose limit it is is the one to watch: its usage is what
  the kernel compares with that limit.

With no cgroup mount in mountinfo under ``cgroup_root`` (a fake tree in a
test, an unusual mount), the layout is guessed: v1 at ``cgroup_root/memory``,
v2 at ``cgroup_root``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

log = logging.getLogger("jobmaster.cgroups")

UNLIMITED = 2**60  # v1 writes a huge number (page-rounded 2**63 - 1) for "no limit"


@dataclass(frozen=True)
class Usage:
    """One reading of a cgroup's memory, in bytes."""

    usage: int  # memory.current / memory.usage_in_bytes: what the kernel compares
    inactive_file: int  # clean page cache the kernel takes back before any OOM kill
    oom_kills: int | None  # processes the kernel OOM-killed in this group so far
    shmem: int = 0  # tmpfs and shared memory (/dev/shm files): held by no process

    @property
    def working_set(self) -> int:
        """What could not be reclaimed without killing: usage less inactive page cache.

        Why: usage counts the page cache of files read and written (logs, an
        embedded Redis's append-only file, the app's own files), which the
        kernel drops before it OOM-kills anyone. Counted in full it keeps a
        busy container "near its limit" for ever and recycles children for
        nothing. Inactive file pages are the ones reclaimed first and
        cheaply; active ones may not be, so they stay counted (the kubelet's
        "working set" is the same sum).
        """
        return max(0, self.usage - self.inactive_file)


@dataclass(frozen=True)
class MemoryCgroup:
    version: int  # 1 or 2
    own: Path  # the folder of the group this process is in
    limited: Path  # the folder whose limit is the tightest (``own`` or an ancestor)
    limit: int | None  # bytes; None: no limit anywhere we can see

    def describe(self) -> str:
        if self.limit is None:
            return f"none (cgroup v{self.version} {self.own}: unlimited)"
        where = f"{self.limited}/{'memory.max' if self.version == 2 else 'memory.limit_in_bytes'}"
        if self.limited != self.own:
            where += f", above our group {self.own}"
        return f"{self.limit / 2**20:.0f} MB (cgroup v{self.version} {where})"

    def read(self) -> Usage | None:
        """The limited group's usage now; None if it cannot be read (a fake tree)."""
        folder = self.limited
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        usage = _number(folder / name)
        if usage is None:
            return None
        stat = _keyed(folder / "memory.stat")
        # v1's plain inactive_file is this group's own pages only.
        inactive = stat.get("inactive_file" if self.version == 2 else "total_inactive_file", 0)
        events = _keyed(folder / ("memory.events" if self.version == 2 else "memory.oom_control"))
        shmem = stat.get("shmem" if self.version == 2 else "total_shmem", 0)
        return Usage(usage, inactive, events.get("oom_kill"), shmem)

    def pids(self) -> list[int]:
        """The processes of our own group (for a log line of what holds memory)."""
        return [
            int(p)
            for line in _lines(self.own / "cgroup.procs")
            if (p := line.strip()).isdigit() and p.isascii()
        ]


def find_memory_cgroup(
    cgroup_root: str = "/sys/fs/cgroup", proc: str = "/proc/self"
) -> MemoryCgroup | None:
    """Our memory cgroup (see the module's docstring); None without one."""
    lines = _lines(Path(proc) / "cgroup")
    memberships = [line.split(":", 2) for line in lines if line.count(":") >= 2]
    v1 = next((m for m in memberships if "memory" in m[1].split(",")), None)
    v2 = next((m for m in memberships if m[0] == "0" and m[1] == ""), None)
    mounts = _cgroup_mounts(Path(proc) / "mountinfo", cgroup_root)
    for version, membership in ((1, v1), (2, v2)):
        if membership is None:
            continue
        mount = mounts.get(version)
        if mount is None:
            guess = Path(cgroup_root) / ("memory" if version == 1 else "")
            mount = (guess, "/")
        own = _folder(mount[0], mount[1], membership[2])
        if version == 2 and not _has_memory(own, mount[0]):
            continue  # a hybrid host's unified tree without the memory controller
        if version == 1 and not own.is_dir():
            continue
        return _with_limit(version, own, mount[0])
    return None


def _folder(mount_point: Path, mount_root: str, path: str) -> Path:
    """The folder of cgroup ``path`` under a mount that shows ``mount_root`` as its root."""
    parts = PurePosixPath(path).parts[1:]
    root = PurePosixPath(mount_root).parts[1:]
    if ".." in parts or tuple(parts[: len(root)]) != root:
        return mount_point  # outside what the mount shows: its root is our group
    folder = mount_point.joinpath(*parts[len(root) :])
    return folder if folder.is_dir() else mount_point


def _with_limit(version: int, own: Path, mount_point: Path) -> MemoryCgroup:
    name = "memory.max" if version == 2 else "memory.limit_in_bytes"
    best: tuple[int, Path] | None = None
    folder = own
    while True:
        limit = _limit(folder / name)
        if limit is not None and (best is None or limit < best[0]):
            best = (limit, folder)
        if folder == mount_point or mount_point not in folder.parents:
            break
        folder = folder.parent
    if version == 1:
        # Ancestors above the mount (a container without a cgroup namespace):
        # their tightest limit, though their usage is out of sight. Ours is
        # then the best reading of what they count.
        hierarchical = _keyed(own / "memory.stat").get("hierarchical_memory_limit")
        if hierarchical and hierarchical < UNLIMITED and (best is None or hierarchical < best[0]):
            best = (hierarchical, own)
    if best is None:
        return MemoryCgroup(version, own, own, None)
    return MemoryCgroup(version, own, best[1], best[0])


def _has_memory(folder: Path, mount_point: Path) -> bool:
    """Whether the memory controller is on in this v2 group: its files are there
    (the root group has none, but lists the controller in cgroup.controllers)."""
    if (folder / "memory.max").exists() or (folder / "memory.current").exists():
        return True
    return folder == mount_point and "memory" in " ".join(_lines(folder / "cgroup.controllers"))


def _cgroup_mounts(mountinfo: Path, cgroup_root: str) -> dict[int, tuple[Path, str]]:
    """{1: (mount point, root) of the v1 memory hierarchy, 2: of the v2 one}, under cgroup_root."""
    found: dict[int, tuple[Path, str]] = {}
    base = Path(cgroup_root)
    for line in _lines(mountinfo):
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        if len(after) < 3:
            continue
        fstype, options = after[0], after[2].split(",")
        root, point = _unescape(fields[3]), Path(_unescape(fields[4]))
        if point != base and base not in point.parents:
            continue
        if fstype == "cgroup2":
            found.setdefault(2, (point, root))
        elif fstype == "cgroup" and "memory" in options:
            found.setdefault(1, (point, root))
    return found


def _unescape(field: str) -> str:
    """mountinfo writes a space, tab, newline or backslash as \\ooo."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _limit(path: Path) -> int | None:
    """A limit file's bytes; None for "max", v1's "unlimited", absent or garbage."""
    value = _number(path)
    return value if value is not None and 0 < value < UNLIMITED else None


def _number(path: Path) -> int | None:
    lines = _lines(path)
    text = lines[0].strip() if lines else ""
    return _digits(text, path) if text not in ("", "max") else None


def _keyed(path: Path) -> dict[str, int]:
    """A flat-keyed file (memory.stat, memory.events, memory.oom_control)."""
    values = {}
    for line in _lines(path):
        key, _, value = line.partition(" ")
        number = _digits(value.strip(), path)
        if number is not None:
            values[key] = number
    return values


_reported: set[Path] = set()  # files already logged as unreadable: once each, not every sample


def _digits(text: str, path: Path) -> int | None:
    """ASCII digits as a number; anything else is reported (once per file) and ignored.

    Why not ``str.isdigit``: it accepts "²" and other Unicode digits that
    ``int`` refuses, and one such file made the master fail at start and
    ``jobmaster check`` crash. The kernel writes none, but a reader of a
    file must not fail on its content.
    """
    if text.isascii() and text.isdigit():
        return int(text)
    if path not in _reported:
        _reported.add(path)
        log.warning("unreadable cgroup file %s (%r): ignored", path, text[:40])
    return None


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
