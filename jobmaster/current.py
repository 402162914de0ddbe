"""``jobmaster.current_job()``: which job the calling code runs in, or None.

Job code often needs its own identity without having it passed in: to log
the jid, to tell a first run from a retry (``attempt``), to find its batch.
It is a ``contextvars.ContextVar``, set around the job's call by whoever
runs it (the worker's executor, ``jobmaster.testing``): a thread sees only
its own job, and an asyncio task started by a job inherits it (a task
copies the context it was created in), where a thread-local would be empty.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

# Runs of a job cut short without an outcome, which its payload carries: its
# worker process died while the job's code ran (a crash), or a stop pushed it
# back to its queue while it ran. Written by the triages of poison.py.
INTERRUPTED = "interrupted_count"


@dataclass(frozen=True)
class JobInfo:
    """The running job, as its payload says it."""

    jid: str
    name: str  # the registered job name, ``myapp.jobs.send_email``
    queue: str
    # This run's number: 1 on the first, then one more after each failure
    # retried (``retry_count``) and each run cut short (``INTERRUPTED``).
    attempt: int
    enqueued_at: float | None  # unix time it was last pushed to its queue
    batch_id: str | None  # None outside a batch

    @classmethod
    def of(cls, payload: Mapping[str, Any], queue: str | None = None) -> JobInfo:
        """Read from a payload; a field that is missing or forged reads as its
        default (fields come from Redis: anyone's to write, SPEC §8)."""
        done = _runs(payload.get("retry_count")) + _runs(payload.get(INTERRUPTED))
        enqueued = payload.get("enqueued_at")
        batch = payload.get("batch")
        return cls(
            jid=str(payload.get("jid", "")),
            name=str(payload.get("job", "")),
            queue=queue if queue is not None else str(payload.get("queue", "")),
            attempt=done + 1,
            enqueued_at=float(enqueued) if _finite(enqueued) else None,
            batch_id=batch if isinstance(batch, str) and batch else None,
        )


def _runs(value: object) -> int:
    """A count of runs as a payload says it; what is not a count reads as none."""
    return max(value, 0) if isinstance(value, int) and not isinstance(value, bool) else 0


def _finite(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class Running:
    """The job a context runs, as set by ``enter``: its ``JobInfo`` is made on
    the first ``current_job()``, not as the job starts. Most jobs never ask,
    and making it for each cost about 2.6 µs of a no-op job's worker CPU
    (~250 µs). Made once, it is the same object for the rest of the job."""

    __slots__ = ("_info", "payload", "queue")

    def __init__(
        self, payload: Mapping[str, Any], queue: str | None, info: JobInfo | None = None
    ) -> None:
        self.payload = payload
        self.queue = queue
        self._info = info

    def info(self) -> JobInfo:
        if self._info is None:
            # Two threads of one job's context may race here (an async task
            # run elsewhere): each makes an equal JobInfo, both correct.
            self._info = JobInfo.of(self.payload, self.queue)
        return self._info


_current: contextvars.ContextVar[Running | None] = contextvars.ContextVar(
    "jobmaster_current_job", default=None
)

Token = contextvars.Token[Running | None]


def current_job() -> JobInfo | None:
    """The job this code runs in (its thread, or an async task it started); None
    outside a job."""
    running = _current.get()
    return running.info() if running is not None else None


def enter(payload: Mapping[str, Any], queue: str | None = None) -> Token:
    """Set ``current_job()`` until ``leave(token)``: the worker's executor, which
    enters a job's other scopes at the same point (worker/executor.py)."""
    return _current.set(Running(payload, queue))


def leave(token: Token) -> None:
    _current.reset(token)


@contextlib.contextmanager
def running_job(payload: Mapping[str, Any], queue: str | None = None) -> Iterator[JobInfo]:
    """Set ``current_job()`` for the duration of one job's call."""
    info = JobInfo.of(payload, queue)
    token = _current.set(Running(payload, queue, info))
    try:
        yield info
    finally:
        _current.reset(token)
