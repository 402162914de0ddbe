"""Process helpers for bench/peers.py and its drivers: stdlib only.

The drivers run inside each peer's own venv, where neither jobmaster nor
bench/harness.py can be imported, so what they need to start, watch and
stop a worker pool lives here.

Every process a run starts carries a marker in its environment
(``BENCH_PEERS_RUN=<run id>``, and ``BENCH_PEERS_WORKER=<id>`` for one
worker pool). The environment is inherited through fork and exec, so the
marker reaches every grandchild, orphan and process-group leader a peer
makes (jobmaster's children have process groups of their own, RQ's work
horses are grandchildren), and a sweep of /proc finds them all without ever
touching another user's process, as a pid list or a process group could
after a pid is reused.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

RUN_MARK = "BENCH_PEERS_RUN"
WORKER_MARK = "BENCH_PEERS_WORKER"


def exit_on_term() -> None:
    """SIGTERM becomes SystemExit, so ``finally`` blocks still stop the workers."""

    def leave(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, leave)


def is_alive(pid: int) -> bool:
    """Running or sleeping, not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # The state follows the command name, which may hold spaces and parentheses.
    return stat.rsplit(")", 1)[1].split()[0] not in {"Z", "X"}


def children(pid: int) -> set[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return set()
    return {int(p) for p in text.split() if is_alive(int(p))}


def descendants(pid: int) -> dict[int, int]:
    """Every live descendant of ``pid`` and its depth (1: a child)."""
    found: dict[int, int] = {}
    level, depth = {pid}, 0
    while level and depth < 8:
        depth += 1
        level = {c for p in level for c in children(p)} - found.keys()
        found.update(dict.fromkeys(level, depth))
    return found


def marked(variable: str, value: str) -> list[int]:
    """Live processes whose environment holds ``variable=value``."""
    needle = f"{variable}={value}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
    return [p for p in pids if p != os.getpid() and is_alive(p)]


def kill_marked(variable: str, value: str) -> list[int]:
    """SIGKILL every marked process; the pids killed."""
    pids = marked(variable, value)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def wait_until(predicate: Any, timeout: float, interval: float = 0.01) -> bool:
    """Poll ``predicate`` until true or ``timeout`` seconds pass; whether it became true."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


class WorkerPool:
    """One peer's worker command (its master and whatever it forks).

    It runs in its own session, so signals meant for the driver never reach
    it; everything it forks carries ``BENCH_PEERS_WORKER=<tag>``, so
    :meth:`cleanup` finds all of it, orphans included.
    """

    def __init__(
        self, command: Sequence[str], env: Mapping[str, str], cwd: Path, logfile: Path, tag: str
    ) -> None:
        self.command = list(command)
        self.env = {**env, WORKER_MARK: tag}
        self.cwd = cwd
        self.logfile = logfile
        self.tag = tag
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0  # time.monotonic() just before the Popen

    @property
    def pid(self) -> int:
        assert self.proc is not None, "worker pool not started"
        return self.proc.pid

    def start(self) -> None:
        with self.logfile.open("ab") as log:
            self.started_at = time.monotonic()
            self.proc = subprocess.Popen(
                self.command,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def terminate(self, timeout: float) -> dict[str, Any]:
        """SIGTERM to the main process only, as systemd's ``KillMode=mixed`` or a
        container runtime would; then wait up to ``timeout`` seconds for it.

        Returns how long it took to exit (``None``: it did not, and was
        SIGKILLed), its exit code, and the pids of its processes still alive
        just after it exited (which are then killed).
        """
        assert self.proc is not None, "worker pool not started"
        started = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
            seconds: float | None = time.monotonic() - started
        except subprocess.TimeoutExpired:
            seconds = None
        leftovers = marked(WORKER_MARK, self.tag)
        self.cleanup()
        return {"exit_s": seconds, "exit_code": self.proc.returncode, "leftover_pids": leftovers}

    def cleanup(self) -> None:
        """SIGKILL the main process and everything it started; reap the main one."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        kill_marked(WORKER_MARK, self.tag)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        # Until they are really gone: a SIGKILLed worker still blocked in a read
        # on a loaded machine can otherwise be handed the next pool's first job
        # by Redis (taskiq's stream consumer took it into its pending list, and
        # the next pool waited for it in vain).
        wait_until(lambda: not marked(WORKER_MARK, self.tag), 10.0, 0.02)

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
