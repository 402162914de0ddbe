"""The two pipes between the master and each child, and what travels on them.

Child to master (the ready pipe): one byte an event: ``R`` the child is up,
``M`` it reached max_jobs_per_child, ``T`` a job is stuck past its timeout;
end of file when it exits.

Master to child (the request pipe): one line a request, ``recycle <reason>``
(over memory: finish your jobs within memory_grace, then stop), or
``push-back <reason>`` (no room left in the container to finish them: a
recycled child pushes its jobs back now), or ``stop <reason>``, written just
before the master's TERM, so that the child's log says whose stop the TERM
is (a Ctrl-C showed SIGINT in the master and a bare "SIGTERM" in each child).
A request, not a signal: a signal may come from anyone (``systemctl kill``
reaches every process of the unit), so a child that treated USR2 as "you are
over your memory limit" was recycled by a platform's broadcast; and a signal
carries no words, so the child could not say which limit it was over.
"""

from __future__ import annotations

import contextlib
import os

READY, MAX_JOBS, STUCK = b"R", b"M", b"T"
RECYCLE, PUSH_BACK, MASTER_STOP = "recycle", "push-back", "stop"
MAX_LINE = 1024  # a request is a verb and a short reason


def send_request(fd: int | None, verb: str, reason: str) -> bool:
    """Write one request (non-blocking); False if the child cannot get it now
    (gone, or its pipe full): the caller's deadlines still apply."""
    if fd is None:
        return False
    line = f"{verb} {' '.join(reason.split())}"[: MAX_LINE - 1] + "\n"
    try:
        return os.write(fd, line.encode()) == len(line.encode())
    except OSError:  # BlockingIOError (full), BrokenPipeError (the child is gone)
        return False


class RequestReader:
    """The child's end: whole lines, read without blocking."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd
        self._partial = b""
        if fd is not None:
            os.set_blocking(fd, False)

    def read(self) -> list[tuple[str, str]]:
        """Requests arrived since the last call: (verb, reason) pairs."""
        if self.fd is None:
            return []
        data = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self.fd, 4096):
                data += chunk
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()[-MAX_LINE:]
        requests = []
        for line in lines:
            verb, _, reason = line.decode(errors="replace").partition(" ")
            requests.append((verb, reason))
        return requests
