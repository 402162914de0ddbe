"""The middleware base class, the list of installed middleware, and Defer."""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis

from jobmaster.errors import ConfigError
from jobmaster.keys import Keys
from jobmaster.scripts import Scripts

log = logging.getLogger("jobmaster.middleware")


class Defer(Exception):  # a decision, not an error: "defer this job"
    """Raised by ``before_process`` to hold a job back for ``seconds``: it goes
    back to the scheduled set, its attempt not counted (it is not a failure)."""

    def __init__(self, seconds: float, reason: str = "") -> None:
        super().__init__(reason or f"held back for {seconds:g}s")
        self.seconds = max(0.0, float(seconds))
        self.reason = reason


@dataclass
class JobContext:
    """What a server hook sees: the job, and Redis to coordinate through."""

    payload: dict[str, Any]
    queue: str
    worker: str  # the worker process's identity
    redis: redis.Redis
    keys: Keys
    scripts: Scripts

    @property
    def jid(self) -> str:
        return str(self.payload.get("jid"))

    @property
    def job(self) -> str:
        return str(self.payload.get("job"))


class Middleware:
    """Hooks around a job's life; override what you need.

    Client side (in the producer): ``before_enqueue(payload)`` returns the
    payload to push (changed or not) or None to not push it.
    Server side (in the worker): ``before_process(job)`` may raise ``Defer``;
    ``after_process(job, error)`` runs after the job, ``error`` None on success.

    Around an ``async def`` job the worker awaits ``abefore_process`` and
    ``aafter_process`` instead, inside the job's own task (its contextvars:
    what a hook sets there, such as a tracing span, is current in the job).
    Their defaults run the sync hooks in a thread of their own, so a sync
    middleware works around async jobs unchanged and its Redis calls never
    block the event loop; an async middleware overrides these two (and may
    leave the sync ones as they are, if it serves only async jobs).
    """

    def before_enqueue(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        return payload

    def before_process(self, job: JobContext) -> None:
        return None

    def after_process(self, job: JobContext, error: BaseException | None) -> None:
        return None

    async def abefore_process(self, job: JobContext) -> None:
        if type(self).before_process is not Middleware.before_process:
            await asyncio.to_thread(self.before_process, job)

    async def aafter_process(self, job: JobContext, error: BaseException | None) -> None:
        if type(self).after_process is not Middleware.after_process:
            await asyncio.to_thread(self.after_process, job, error)


_installed: list[Middleware] = []


def add(middleware: Middleware) -> None:
    """Install for every job (client and server side)."""
    if not isinstance(middleware, Middleware):
        raise TypeError(f"{middleware!r} is not a jobmaster.middleware.Middleware")
    _installed.append(middleware)


def clear() -> None:
    _installed.clear()


def installed() -> list[Middleware]:
    return list(_installed)


def load(paths: Iterable[str], source: str = "config") -> None:
    """Install ``module:Class`` (or ``module.Class``) entries from the config.

    The names come from the operator's config file, never from Redis.
    """
    for path in paths:
        module_name, _, name = path.partition(":") if ":" in path else path.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module_name), name)
            add(cls())
        except Exception as error:
            raise ConfigError(
                f"{source}: middleware {path!r}: {type(error).__name__}: {error}"
            ) from None


def before_enqueue(payload: dict[str, Any]) -> dict[str, Any] | None:
    """Run every installed client hook; None if one of them dropped the job."""
    current: dict[str, Any] | None = payload
    for middleware in _installed:
        if current is None:
            return None
        try:
            current = middleware.before_enqueue(current)
        except Exception:
            log.exception("middleware %s failed before enqueue; ignored", type(middleware).__name__)
    return current


def before_process(chain: list[Middleware], job: JobContext) -> None:
    """Run the server hooks in order; ``Defer`` propagates, other errors are logged."""
    for middleware in chain:
        try:
            middleware.before_process(job)
        except Defer:
            raise
        except Exception:
            log.exception(
                "middleware %s failed before jid=%s; ignored", type(middleware).__name__, job.jid
            )


def after_process(chain: list[Middleware], job: JobContext, error: BaseException | None) -> None:
    for middleware in reversed(chain):
        try:
            middleware.after_process(job, error)
        except Exception:
            log.exception(
                "middleware %s failed after jid=%s; ignored", type(middleware).__name__, job.jid
            )


async def abefore_process(chain: list[Middleware], job: JobContext) -> None:
    """``before_process`` around an async job: each hook awaited, in order."""
    for middleware in chain:
        try:
            await middleware.abefore_process(job)
        except Defer:
            raise
        except Exception:
            log.exception(
                "middleware %s failed before jid=%s; ignored", type(middleware).__name__, job.jid
            )


async def aafter_process(
    chain: list[Middleware], job: JobContext, error: BaseException | None
) -> None:
    for middleware in reversed(chain):
        try:
            await middleware.aafter_process(job, error)
        except Exception:
            log.exception(
                "middleware %s failed after jid=%s; ignored", type(middleware).__name__, job.jid
            )
