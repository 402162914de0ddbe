"""A real memory cgroup of a test's own, under the one the test runs in.

The memory killer's container rules must hold where the kernel applies
them, not only against a fake ``memory.max``: a test makes a group with a
limit, starts a master in it, and reads the kernel's OOM-kill counter.
Needs root and the memory controller (cgroup v1, or v2 with the
controller delegated to a group that holds no process); otherwise
``make`` says why and the caller skips.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

MOUNT = Path("/sys/fs/cgroup")


class Unavailable(Exception):
    """No real memory cgroup can be made here; the message says why."""


@dataclass
class ScratchCgroup:
    version: int
    path: Path

    def set_limit(self, limit_bytes: int) -> None:
        name = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
        (self.path / name).write_text(f"{limit_bytes}\n")

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer has killed in this group."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        for line in (self.path / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        raise AssertionError(f"no oom_kill counter in {self.path / name} (kernel < 4.13?)")

    def usage(self) -> int:
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        return int((self.path / name).read_text())

    def peak(self) -> int | None:
        """The highest usage so far (v2 kernels before 5.19 keep none)."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        with contextlib.suppress(OSError, ValueError):
            return int((self.path / name).read_text())
        return None

    def pids(self) -> list[int]:
        text = (self.path / "cgroup.procs").read_text()
        return [int(pid) for pid in text.split()]

    def wrap(self, command: list[str]) -> list[str]:
        """``command``, run inside this group (a shell joins it, then execs)."""
        join = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
        return ["/bin/sh", "-c", join, str(self.path), *command]

    def destroy(self, timeout: float = 10.0) -> None:
        """SIGKILL everything left in it, then remove it (a group with members cannot go)."""
        deadline = time.monotonic() + timeout
        while self.path.exists():
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):  # EBUSY while the dying still count
                self.path.rmdir()
            if time.monotonic() > deadline:
                raise AssertionError(f"could not remove {self.path}: {self.pids()} still in it")
            time.sleep(0.02)


def own_group() -> tuple[int, Path]:
    """This process's memory cgroup folder: (version, path)."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            folder = MOUNT / "memory" / path.lstrip("/")
            if folder.is_dir():
                return 1, folder
    for line in lines:
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0" and controllers == "":
            folder = MOUNT / path.lstrip("/")
            if "memory" in (folder / "cgroup.controllers").read_text().split():
                return 2, folder
    raise Unavailable("no memory cgroup controller (neither v1 nor v2) for this process")


def make(limit_bytes: int) -> ScratchCgroup:
    """A new group with ``limit_bytes``; the caller destroys it."""
    if os.geteuid() != 0:
        raise Unavailable("making a cgroup needs root")
    version, parent = own_group()
    if version == 2:
        with contextlib.suppress(OSError):
            (parent / "cgroup.subtree_control").write_text("+memory")
        if "memory" not in (parent / "cgroup.subtree_control").read_text().split():
            raise Unavailable(
                f"cgroup v2: cannot enable the memory controller below {parent} "
                "(it holds processes, or it is not delegated to us)"
            )
    path = parent / f"jobmaster-test-{uuid.uuid4().hex[:12]}"
    try:
        path.mkdir()
    except OSError as error:
        raise Unavailable(f"cannot make a cgroup under {parent}: {error}") from error
    group = ScratchCgroup(version, path)
    try:
        group.set_limit(limit_bytes)
    except BaseException:
        group.destroy()
        raise
    return group
