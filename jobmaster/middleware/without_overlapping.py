"""WithoutOverlapping: jobs sharing a key never run at the same time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jobmaster.middleware.base import Defer, JobContext, Middleware
from jobmaster.scripts import Unlock

KeySpec = str | Callable[[dict[str, Any]], str]


class WithoutOverlapping(Middleware):
    """A lock per ``key`` (a string, or a function of the payload), held while
    the job runs and released after it; ``release_after`` seconds bound it, so
    a worker that died holding it can't block the key forever. A job that
    finds the lock taken is deferred until it is likely free."""

    def __init__(self, key: KeySpec, release_after: float) -> None:
        if release_after <= 0:
            raise ValueError("WithoutOverlapping needs release_after > 0 seconds")
        self.key, self.release_after = key, float(release_after)

    def lock(self, job: JobContext) -> str:
        name = self.key(job.payload) if callable(self.key) else self.key
        return job.keys.overlap(name)

    def before_process(self, job: JobContext) -> None:
        lock = self.lock(job)
        ttl = max(1, round(self.release_after))
        if not job.redis.set(lock, job.jid, nx=True, ex=ttl):
            left = job.redis.pttl(lock)
            wait = min(max(float(left) / 1000 if isinstance(left, int) else 1.0, 0.2), 5.0)
            raise Defer(wait, f"another job holds {lock.rsplit(':', 1)[-1]}")

    def after_process(self, job: JobContext, error: BaseException | None) -> None:
        Unlock(lock_key=self.lock(job), jid=job.jid).run(job.scripts.unlock)
