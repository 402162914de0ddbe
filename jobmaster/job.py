"""The job API: ``@jobmaster.job`` and what a decorated function can do.

A decorated function stays callable as before (a plain call runs inline);
``enqueue``, ``enqueue_in``, ``enqueue_at`` and ``options(...)`` push it to
Redis through the default client (client.py); ``aenqueue``, ``aenqueue_in``
and ``aenqueue_at`` push the same payload through that client's asyncio
twin (aio/client.py), for code running on an event loop.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import inspect
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Generic, ParamSpec, TypeVar, overload

from jobmaster import crypto, registry
from jobmaster import payload as wire
from jobmaster.aio.client import async_client
from jobmaster.backoff import DEFAULT_RETRY, Backoff
from jobmaster.client import Client, default_client
from jobmaster.current import running_job
from jobmaster.job_options import OPTION_NAMES, JobOptions
from jobmaster.middleware.base import Middleware
from jobmaster.unique import UniqueArgs, digest, lock_ttl
from jobmaster.workflows.batch import collecting
from jobmaster.workflows.signature import Signature

P = ParamSpec("P")
R = TypeVar("R")


class InlineMode:
    """Set by ``jobmaster.testing.inline()``: enqueue runs the job at once, in process."""

    depth = 0


INLINE = InlineMode()


def unix_time(when: datetime.datetime | float | int) -> float:
    """A datetime (naive means local time, as Python does) or unix time, as unix time."""
    if isinstance(when, datetime.datetime):
        return when.timestamp()
    if isinstance(when, bool) or not isinstance(when, int | float):
        raise TypeError(f"enqueue_at takes a datetime or unix time, got {when!r}")
    return float(when)


class BoundJob(Generic[P, R]):
    """A job with a given set of options, ready to enqueue."""

    def __init__(self, job: JobFunction[P, R], options: JobOptions) -> None:
        self.job = job
        self.job_options = options

    def enqueue(self, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """Push the job now; returns its jid (None: a unique job's duplicate)."""
        return self._push(None, args, kwargs)

    def enqueue_in(self, seconds: float, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """Push the job to run ``seconds`` from now; its jid (None: a duplicate)."""
        return self._push(time.time() + float(seconds), args, kwargs)

    def enqueue_at(
        self, when: datetime.datetime | float, /, *args: P.args, **kwargs: P.kwargs
    ) -> str | None:
        """Push the job to run at ``when`` (datetime or unix time); its jid, or None."""
        return self._push(unix_time(when), args, kwargs)

    async def aenqueue(self, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """``enqueue`` on the asyncio client: the loop is never blocked."""
        return await self._apush(None, args, kwargs)

    async def aenqueue_in(self, seconds: float, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """``enqueue_in`` on the asyncio client."""
        return await self._apush(time.time() + float(seconds), args, kwargs)

    async def aenqueue_at(
        self, when: datetime.datetime | float, /, *args: P.args, **kwargs: P.kwargs
    ) -> str | None:
        """``enqueue_at`` on the asyncio client."""
        return await self._apush(unix_time(when), args, kwargs)

    def s(self, /, *args: P.args, **kwargs: P.kwargs) -> Signature:
        """This call as data, for a chain step or a batch's job or callback."""
        options = self.job_options
        if options.unique is not None or options.encrypt:
            raise ValueError(
                f"{self.job.name}: unique and encrypted jobs cannot be chain steps, batch "
                "callbacks or signatures (their lock or sealed arguments need enqueue)"
            )
        fields = {"queue": options.queue, "retry": options.retry, **options.payload_fields()}
        return Signature(self.job.name, args, kwargs, fields)

    # Both paths, sync and asyncio, build the payload and decide where it goes
    # with the same methods; they differ only in the client that sends it.
    def _push(self, at: float | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        built = self._build(args, kwargs)
        if INLINE.depth > 0:
            return self._run_inline(built)
        if self._collected_or_ready(built, at, args, kwargs):
            return str(built["jid"])
        client: Client = self.job.client or default_client()
        unique = self.job_options.unique
        if unique is not None:
            locked = client.push_unique(built, lock_ttl(unique), at=at)
            return str(built["jid"]) if locked else None
        pushed = client.push_payloads([built], at=at)
        return str(built["jid"]) if pushed else None  # None: a client middleware dropped it

    async def _apush(
        self, at: float | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> str | None:
        built = self._build(args, kwargs)
        if INLINE.depth > 0:
            return await self._arun_inline(built)
        if self._collected_or_ready(built, at, args, kwargs):
            return str(built["jid"])
        client = await async_client(self.job.client)
        unique = self.job_options.unique
        if unique is not None:
            locked = await client.push_unique(built, lock_ttl(unique), at=at)
            return str(built["jid"]) if locked else None
        pushed = await client.push_payloads([built], at=at)
        return str(built["jid"]) if pushed else None  # None: a client middleware dropped it

    def _build(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        options = self.job_options
        return wire.build(
            self.job.name,
            args,
            kwargs,
            queue=options.queue,
            retry=options.retry,
            extra=options.payload_fields(),
        )

    def _collected_or_ready(
        self, built: dict[str, Any], at: float | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> bool:
        """Seal the payload (encrypt), and either hand it to the batch whose
        ``jobs()`` block is open (True: it is pushed with the batch) or make it
        ready for its own push (a unique job's lock digest)."""
        options = self.job_options
        if options.encrypt:  # after the inline run: that one gets the plain arguments
            crypto.seal_payload(built)
        batch = collecting()
        if batch is not None:  # inside ``with b.jobs():``: pushed with the batch
            if options.unique is not None:
                raise ValueError(f"{self.job.name}: a unique job cannot join a batch")
            batch.collect(built, at)
            return True
        if options.unique is not None:
            built["unique"] = options.unique
            built["unique_digest"] = digest(self.job.name, args, kwargs, options.unique_args)
        return False

    def _run_inline(self, built: dict[str, Any]) -> str:
        """Run the job now, in this thread (``testing.inline()``). An async job
        runs to its end on an event loop of its own: none may run here."""
        decoded = _as_a_worker_sees_it(built)
        with running_job(decoded):  # jobmaster.current_job() as in a worker
            returned = self.job.func(*decoded["args"], **decoded["kwargs"])
            if inspect.isawaitable(returned):
                _run_to_end(returned, self.job.name)
        return str(built["jid"])

    async def _arun_inline(self, built: dict[str, Any]) -> str:
        """``aenqueue`` inline: an async job is awaited here, a sync one runs in a
        thread (``asyncio.to_thread``) so that it cannot block the loop."""
        decoded = _as_a_worker_sees_it(built)
        func, args, kwargs = self.job.func, decoded["args"], decoded["kwargs"]
        if self.job.is_async:
            with running_job(decoded):
                await func(*args, **kwargs)  # type: ignore[misc]
        else:

            def call() -> None:
                with running_job(decoded):
                    func(*args, **kwargs)

            await asyncio.to_thread(call)
        return str(built["jid"])


def _as_a_worker_sees_it(built: dict[str, Any]) -> dict[str, Any]:
    """The payload round-tripped through JSON: the arguments a worker would pass."""
    decoded: dict[str, Any] = json.loads(wire.encode(built))
    return decoded


def _run_to_end(awaitable: Any, name: str) -> None:
    """An async job's coroutine, run inline by a sync ``enqueue``."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop here: the usual case in a sync test
        asyncio.run(_awaited(awaitable))
        return
    if inspect.iscoroutine(awaitable):
        awaitable.close()  # never awaited: closed, so Python does not warn about it
    raise RuntimeError(
        f"{name} is an async job, enqueued inline from inside a running event loop: "
        f"use await {name.rpartition('.')[2]}.aenqueue(...) there"
    )


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def is_async_job(func: Callable[..., Any]) -> bool:
    """Whether ``func`` is an ``async def`` job (or a callable whose ``__call__``
    is, or a partial of one): it runs on its child's event loop (SPEC 12).

    An async generator is refused: its body would never run (a worker would
    get an async iterator and record the job complete); generators are the
    iterable jobs of SPEC 13.
    """
    call = getattr(func, "__call__", None)  # noqa: B004 - an instance's async __call__
    candidates = (func, call, getattr(func, "func", None))  # a functools.partial's target
    if any(inspect.isasyncgenfunction(f) for f in candidates if f is not None):
        raise TypeError(
            f"{getattr(func, '__qualname__', func)!r} is an async generator: a job is a "
            "function or an async def function, not a generator"
        )
    return any(inspect.iscoroutinefunction(f) for f in candidates if f is not None)


class JobFunction(Generic[P, R]):
    """A function registered as a job."""

    def __init__(self, func: Callable[P, R], name: str, options: JobOptions) -> None:
        self.is_async = is_async_job(func)  # runs on its child's event loop
        self.func = func
        self.name = name
        self.job_options = options
        self.client: Client | None = None  # None: the default client
        functools.update_wrapper(self, func)
        self._bound = BoundJob(self, options)  # its own options: built once, not per enqueue
        registry.register(self)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """A plain call runs the function inline, as if it were not a job."""
        return self.func(*args, **kwargs)

    def options(self, **overrides: Any) -> BoundJob[P, R]:
        """The same job with other options for one enqueue: ``.options(queue="x").enqueue()``."""
        unknown = set(overrides) - OPTION_NAMES
        if unknown:
            raise TypeError(f"{self.name}: unknown option(s) {', '.join(sorted(unknown))}")
        return BoundJob(self, replace(self.job_options, **overrides))

    def s(self, /, *args: P.args, **kwargs: P.kwargs) -> Signature:
        """This call as data: ``jobmaster.chain(a.s(1), b.s())``, ``batch.add(a.s(2))``."""
        return BoundJob(self, self.job_options).s(*args, **kwargs)

    def enqueue(self, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """Push the job now; returns its jid (None: a unique job's duplicate)."""
        bound = self._bound
        if bound.job_options is not self.job_options:  # options replaced since
            bound = self._bound = BoundJob(self, self.job_options)
        return bound._push(None, args, kwargs)

    def enqueue_in(self, seconds: float, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """Push the job to run ``seconds`` from now; its jid (None: a duplicate)."""
        return BoundJob(self, self.job_options).enqueue_in(seconds, *args, **kwargs)

    async def aenqueue(self, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """``enqueue`` on the asyncio client (SPEC 12): awaits Redis, never blocks the loop."""
        return await BoundJob(self, self.job_options)._apush(None, args, kwargs)

    async def aenqueue_in(self, seconds: float, /, *args: P.args, **kwargs: P.kwargs) -> str | None:
        """``enqueue_in`` on the asyncio client."""
        return await BoundJob(self, self.job_options).aenqueue_in(seconds, *args, **kwargs)

    async def aenqueue_at(
        self, when: datetime.datetime | float, /, *args: P.args, **kwargs: P.kwargs
    ) -> str | None:
        """``enqueue_at`` on the asyncio client."""
        return await BoundJob(self, self.job_options).aenqueue_at(when, *args, **kwargs)

    def enqueue_at(
        self, when: datetime.datetime | float, /, *args: P.args, **kwargs: P.kwargs
    ) -> str | None:
        """Push the job to run at ``when`` (datetime or unix time); its jid, or None."""
        return BoundJob(self, self.job_options).enqueue_at(when, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<job {self.name} queue={self.job_options.queue}>"


@overload
def job(func: Callable[P, R], /) -> JobFunction[P, R]: ...


@overload
def job(
    *,
    name: str | None = None,
    queue: str = "default",
    retry: int | bool = DEFAULT_RETRY,
    backoff: Backoff | None = None,
    timeout: float | None = None,
    unique: Any = None,
    unique_args: UniqueArgs | None = None,
    middleware: Sequence[Middleware] = (),
    encrypt: bool = False,
    result_ttl: float | None = None,
    expires_in: float | None = None,
    on_success: Callable[[dict[str, Any]], Any] | None = None,
    on_failure: Callable[[dict[str, Any], BaseException], Any] | None = None,
) -> Callable[[Callable[P, R]], JobFunction[P, R]]: ...


def job(
    func: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str = "default",
    retry: int | bool = DEFAULT_RETRY,
    backoff: Backoff | None = None,
    timeout: float | None = None,
    unique: Any = None,
    unique_args: UniqueArgs | None = None,
    middleware: Sequence[Middleware] = (),
    encrypt: bool = False,
    result_ttl: float | None = None,
    expires_in: float | None = None,
    on_success: Callable[[dict[str, Any]], Any] | None = None,
    on_failure: Callable[[dict[str, Any], BaseException], Any] | None = None,
) -> JobFunction[P, R] | Callable[[Callable[P, R]], JobFunction[P, R]]:
    """Register a function as a job: ``@jobmaster.job`` or ``@jobmaster.job(queue=...)``.

    Its name is ``module.qualname`` unless ``name`` is given; workers run only
    registered names.
    """
    options = JobOptions(
        queue=queue,
        retry=retry,
        backoff=backoff,
        timeout=timeout,
        unique=unique,
        unique_args=unique_args,
        middleware=tuple(middleware),
        encrypt=encrypt,
        result_ttl=result_ttl,
        expires_in=expires_in,
        on_success=on_success,
        on_failure=on_failure,
    )

    def decorate(function: Callable[P, R]) -> JobFunction[P, R]:
        is_async_job(function)  # an async generator fails here, before its name is made
        job_name = name or f"{function.__module__}.{function.__qualname__}"
        return JobFunction(function, job_name, options)

    return decorate(func) if func is not None else decorate
