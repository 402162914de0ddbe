"""The names of the jobs this process may run.

Workers run only jobs registered here by ``@jobmaster.job`` in the imported
app modules. A payload naming anything else is dead on arrival: nothing is
ever imported or called by a name read from Redis, which would let anyone
who can write to Redis run ``os.system``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from jobmaster.job_options import JobOptions


class RegisteredJob(Protocol):
    """What the registry keeps of a job (job.py's ``JobFunction``) and its readers use."""

    @property
    def name(self) -> str: ...
    @property
    def func(self) -> Callable[..., Any]: ...
    @property
    def job_options(self) -> JobOptions: ...
    @property
    def is_async(self) -> bool: ...  # an ``async def`` job: it runs on the event loop


_JOBS: dict[str, RegisteredJob] = {}


def register(job: RegisteredJob) -> None:
    """Add a job; a second, different function under the same name is an error.

    Re-registering the same function (a module imported twice, a reload) is
    fine; two functions sharing a name would make a payload ambiguous.
    """
    existing = _JOBS.get(job.name)
    if existing is not None and existing.func is not job.func:
        same_place = (existing.func.__module__, existing.func.__qualname__) == (
            job.func.__module__,
            job.func.__qualname__,
        )
        if not same_place:
            raise ValueError(
                f"two jobs are named {job.name!r}: {existing.func.__module__}."
                f"{existing.func.__qualname__} and {job.func.__module__}.{job.func.__qualname__}"
            )
    _JOBS[job.name] = job


def lookup(name: object) -> RegisteredJob | None:
    """The registered job of that name, or None."""
    return _JOBS.get(name) if isinstance(name, str) else None


def any_async() -> bool:
    """Whether an ``async def`` job is registered (a child then runs an event loop)."""
    return any(job.is_async for job in _JOBS.values())


def names() -> list[str]:
    """Every registered job name, sorted."""
    return sorted(_JOBS)
