"""Batches: many jobs, tracked together, with callbacks when they are done.

::

    b = jobmaster.batch(description="import 2026-11", on_success=report.s("ok"))
    with b.jobs():
        for row in rows:
            import_row.enqueue(row)
    jobmaster.batch_status(b.bid)

Every ``enqueue`` inside ``with b.jobs():`` (and every ``b.add(sig)``) is
collected and pushed with the batch's counters in one BATCH_ADD script when
the block ends: a callback cannot fire while part of a block is not pushed,
however fast the first jobs run. Outside a block, ``b.add(*sigs)`` is one such
step by itself. A job of the batch may add more jobs to it while it runs
(``jobmaster.current_batch()``): it is still pending then, so the batch cannot
complete in between.

Callbacks (each optional, each fired exactly once, by the FINISH_STEP of the
job that settles the batch):

- ``on_complete``: every job has run at least once (succeeded, or failed and
  waiting for a retry, or dead) or was skipped by ``cancel()``; a job
  stopped by ``jobmaster.cancel(jid)`` counts as failed for good;
- ``on_success``: every job succeeded (a retry that succeeds counts);
- ``on_death``: the first time one of its jobs goes to the dead set.

A callback job gets its signature's arguments plus ``batch_id=``.

On an event loop, ``async with b.ajobs():`` and ``await b.aadd(...)`` collect
the same way and send the same BATCH_ADD (``_call``) on the asyncio client.

Each job of a batch carries its callbacks' queues and jids
(``batch_callbacks``): the script that may fire a callback must be given
the keys it writes (its queue and status), and the job's outcome is where
that script runs. A ``Batch`` made by id (to add jobs to a batch made
elsewhere) reads them from the batch's hash first; inside a job of the
batch, ``current_batch()`` has them from the running job's payload.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from jobmaster import payload as wire
from jobmaster.aio.client import AsyncClient, async_client
from jobmaster.aio.scripts import run
from jobmaster.api.batches import BatchSet
from jobmaster.client import Client, default_client
from jobmaster.connection import describe_error
from jobmaster.errors import EnqueueError
from jobmaster.keys import Keys
from jobmaster.middleware import base as middleware
from jobmaster.scripts import BatchAdd, BatchJob, CallbackTargets
from jobmaster.workflows.signature import Signature, as_signature

BATCH_TTL = 30 * 24 * 3600  # seconds a batch is kept after its last jobs were added
CALLBACKS = ("complete", "success", "death")
TARGET_FIELDS = [f"on:{n}:{f}" for n in CALLBACKS for f in ("queue", "jid")]  # in the hash

# The batch whose ``jobs()`` block is open in this thread (or task).
_collecting: contextvars.ContextVar[Batch | None] = contextvars.ContextVar(
    "jobmaster_batch_collecting", default=None
)
# The batch id and callbacks of the job running in this processor thread.
_running: contextvars.ContextVar[tuple[str, dict[str, tuple[str, str]] | None] | None] = (
    contextvars.ContextVar("jobmaster_batch_running", default=None)
)

# Callback name -> (queue, jid), as batch jobs carry them.
Targets = dict[str, tuple[str, str]]


def _targets_of(found: list[Any]) -> Targets:
    """HMGET's reply for ``TARGET_FIELDS`` as the callbacks' queues and jids."""
    text = [v.decode() if isinstance(v, bytes) else v for v in found]
    return callbacks_of(
        {"batch_callbacks": {n: text[2 * i : 2 * i + 2] for i, n in enumerate(CALLBACKS)}}
    )


def callbacks_of(payload: Mapping[str, Any]) -> Targets:
    """The well-formed entries of the payload's ``batch_callbacks`` (a malformed
    one is left out: that callback then goes through the scheduled set)."""
    found = payload.get("batch_callbacks")
    if not isinstance(found, Mapping):
        return {}
    return {
        name: (value[0], value[1])
        for name, value in found.items()
        if name in CALLBACKS
        and isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(part, str) and part and wire.key_safe(part) for part in value)
    }


def callback_targets(keys: Keys, callbacks: Mapping[str, tuple[str, str]]) -> CallbackTargets:
    """The queue list and status key of each batch callback; any declared key
    (the batches index) for one that is unknown."""

    def target(name: str) -> tuple[str, str]:
        queue, jid = callbacks.get(name, ("", ""))
        return (keys.queue(queue), keys.status(jid)) if jid else (keys.batches, keys.batches)

    return CallbackTargets(
        complete=target("complete"), success=target("success"), death=target("death")
    )


@dataclass
class Pending:
    """A job collected by an open ``jobs()`` block, pushed when it closes."""

    payload: dict[str, Any]
    at: float | None


class Batch:
    """A batch of jobs; nothing is in Redis until its first jobs are added."""

    def __init__(
        self,
        bid: str | None = None,
        *,
        description: str = "",
        on_complete: Signature | None = None,
        on_success: Signature | None = None,
        on_death: Signature | None = None,
        client: Client | None = None,
    ) -> None:
        self.bid = bid or wire.new_jid()
        self.description = str(description)
        self.callbacks: dict[str, Signature] = {}
        for name, value in zip(CALLBACKS, (on_complete, on_success, on_death), strict=True):
            if value is not None:
                self.callbacks[name] = as_signature(value, f"on_{name}")
        self._client = client
        self._collected: list[Pending] | None = None
        # The callbacks' payloads, made once: their jids are written to the hash
        # by the first push and carried by every job, so they must not change.
        self._callback_payloads: dict[str, dict[str, Any]] | None = None
        # name -> (queue, jid) of the callbacks the hash holds; None: not known
        # yet (a batch made by id reads them before its first push).
        self._targets: Targets | None = None if bid and not self.callbacks else {}

    def __repr__(self) -> str:
        return f"<batch {self.bid} {self.description!r}>"

    @property
    def client(self) -> Client:
        return self._client or default_client()

    # -- adding jobs ------------------------------------------------------
    @contextlib.contextmanager
    def jobs(self) -> Iterator[Batch]:
        """Collect every ``enqueue`` (and ``add``) of this block; push them all at
        its end, in one step. Nothing is pushed if the block raises."""
        token = self._open()
        try:
            yield self
        finally:
            collected = self._close(token)
        self._push(collected)

    @contextlib.asynccontextmanager
    async def ajobs(self) -> AsyncIterator[Batch]:
        """``jobs()`` for code on an event loop: every ``aenqueue`` (or
        ``enqueue``, ``add``) of the block, and of the tasks it starts and
        awaits, is pushed at its end on the asyncio client."""
        token = self._open()
        try:
            yield self
        finally:
            collected = self._close(token)
        await self._apush(collected)

    def _open(self) -> contextvars.Token[Batch | None]:
        if self._collected is not None:
            raise RuntimeError(f"batch {self.bid}: jobs() blocks do not nest")
        self._collected = []
        return _collecting.set(self)

    def _close(self, token: contextvars.Token[Batch | None]) -> list[Pending]:
        _collecting.reset(token)
        collected, self._collected = self._collected or [], None
        return collected

    def add(self, *signatures: Signature) -> list[str]:
        """Add jobs by signature; their jids. In a ``jobs()`` block they are
        pushed with the rest of it; outside one, now, as one step."""
        pending = self._pending(signatures)
        if self._collected is not None:
            self._collected.extend(pending)
        else:
            self._push(pending)
        return [str(p.payload["jid"]) for p in pending]

    async def aadd(self, *signatures: Signature) -> list[str]:
        """``add`` on the asyncio client."""
        pending = self._pending(signatures)
        if self._collected is not None:
            self._collected.extend(pending)
        else:
            await self._apush(pending)
        return [str(p.payload["jid"]) for p in pending]

    @staticmethod
    def _pending(signatures: tuple[Signature, ...]) -> list[Pending]:
        return [Pending(as_signature(sig, "add()").payload(), None) for sig in signatures]

    def collect(self, payload: dict[str, Any], at: float | None) -> None:
        """Called by ``enqueue`` inside an open ``jobs()`` block."""
        if self._collected is None:  # pragma: no cover - only reachable through _collecting
            raise RuntimeError(f"batch {self.bid}: no jobs() block is open")
        self._collected.append(Pending(payload, at))

    def targets(self) -> Targets:
        """The callbacks' queues and jids, for the jobs to carry (see the module)."""
        if self._targets is None:
            client = self.client
            with self._reading():
                found = client.redis.hmget(client.keys.batch(self.bid), TARGET_FIELDS)
            self._targets = _targets_of(found)
        elif not self._targets and self.callbacks:
            self._targets = {
                name: (str(p["queue"]), str(p["jid"])) for name, p in self._callbacks().items()
            }
        return self._targets

    async def _atargets(self, client: AsyncClient) -> Targets:
        """``targets()``, read on the asyncio client when not known yet."""
        if self._targets is None:
            with self._reading():
                found = await client.redis.hmget(client.keys.batch(self.bid), TARGET_FIELDS)
            self._targets = _targets_of(found)
        return self.targets()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        try:
            yield
        except redis.RedisError as error:
            reason = describe_error(error)
            raise EnqueueError(f"could not read batch {self.bid}: {reason}") from error

    # One BATCH_ADD either way: built by ``_call``, sent by either client.
    def _push(self, collected: list[Pending]) -> None:
        client = self.client
        call = self._call(collected, client.keys, client.status_ttl, self.targets())
        with self._pushing():
            call.run(client.scripts.batch_add)

    async def _apush(self, collected: list[Pending]) -> None:
        client = await async_client(self._client)
        call = self._call(collected, client.keys, client.status_ttl, await self._atargets(client))
        with self._pushing():
            await run(call, client.scripts.batch_add)

    @contextlib.contextmanager
    def _pushing(self) -> Iterator[None]:
        try:
            yield
        except redis.RedisError as error:
            reason = describe_error(error)
            raise EnqueueError(f"could not push batch {self.bid}: {reason}") from error

    def _call(
        self, collected: list[Pending], keys: Keys, status_ttl: int, targets: Targets
    ) -> BatchAdd:
        """The BATCH_ADD of the collected jobs (after the client middleware)."""
        now = time.time()
        carried = {"batch_callbacks": {n: list(t) for n, t in targets.items()}}
        jobs: list[BatchJob] = []
        for item in collected:
            payload = middleware.before_enqueue({**item.payload, "batch": self.bid, **carried})
            if payload is None:
                continue  # dropped by a client middleware
            later = item.at is not None and item.at > now
            payload["enqueued_at"] = now
            queue, jid = str(payload["queue"]), str(payload["jid"])
            job = BatchJob(
                queue=queue,
                due=item.at if item.at is not None and later else 0,
                jid=jid,
                payload=wire.encode(payload),
                queue_key=keys.queue(queue),
                status_key=keys.status(jid),
            )
            jobs.append(job)
        return BatchAdd(
            batch_key=keys.batch(self.bid),
            failed_key=keys.batch_failed(self.bid),
            batches_key=keys.batches,
            queues_key=keys.queues,
            scheduled_key=keys.scheduled,
            callbacks=callback_targets(keys, targets),
            bid=self.bid,
            now=repr(now),
            batch_ttl=BATCH_TTL,
            queue_prefix=keys.queue_prefix,
            wakeup_prefix=keys.wakeup_prefix,
            status_prefix=keys.status_prefix if status_ttl else "",
            status_ttl=status_ttl or 1,
            fields=self._fields(),
            jobs=jobs,
        )

    def _fields(self) -> dict[str, Any]:
        """The batch hash's fields, written only by the call that creates it."""
        fields: dict[str, Any] = {"description": self.description}
        for name, payload in self._callbacks().items():
            text = wire.encode(payload).decode()
            fields[f"on:{name}:queue"] = payload["queue"]
            fields[f"on:{name}:jid"] = payload["jid"]
            fields[f"on:{name}:head"] = text[:-1]  # FINISH_STEP adds enqueued_at and the brace
        return fields

    def _callbacks(self) -> dict[str, dict[str, Any]]:
        """The callbacks' payloads, made once, through the client middleware as
        any enqueue is (a tracing middleware puts the batch's trace in them);
        one a middleware drops is kept as it was: a batch's callback is part
        of the batch, not a job of its own to refuse."""
        if self._callback_payloads is None:
            made = {}
            for name, sig in self.callbacks.items():
                payload = sig.with_kwargs(batch_id=self.bid).payload({"callback_of": self.bid})
                made[name] = middleware.before_enqueue(dict(payload)) or payload
            self._callback_payloads = made
        return self._callback_payloads

    # -- steering it -------------------------------------------------------
    def cancel(self) -> bool:
        """Skip the jobs of this batch not yet started (counted as skipped, not
        run). True if the batch exists."""
        return BatchSet(self.client).cancel(self.bid)

    def status(self) -> dict[str, Any] | None:
        return batch_status(self.bid, self.client)


def batch(
    *,
    description: str = "",
    on_complete: Signature | None = None,
    on_success: Signature | None = None,
    on_death: Signature | None = None,
    client: Client | None = None,
) -> Batch:
    """A new batch (see the module's docstring); add jobs with ``jobs()`` or ``add``."""
    return Batch(
        description=description,
        on_complete=on_complete,
        on_success=on_success,
        on_death=on_death,
        client=client,
    )


def collecting() -> Batch | None:
    """The batch whose ``jobs()`` block is open here, if any (the job API asks)."""
    return _collecting.get()


def current_batch(client: Client | None = None) -> Batch | None:
    """Inside a running job of a batch: that batch, to add more jobs to it."""
    running = _running.get()
    if running is None:
        return None
    bid, targets = running
    found = Batch(bid, client=client)
    found._targets = targets  # None (a job from before payloads carried them): read
    return found


@contextlib.contextmanager
def running_in(payload: Mapping[str, Any]) -> Iterator[None]:
    """Set ``current_batch()`` while a worker runs this payload's job."""
    token = enter_running(payload)
    try:
        yield
    finally:
        leave_running(token)


RunningToken = contextvars.Token[tuple[str, dict[str, tuple[str, str]] | None] | None]


def enter_running(payload: Mapping[str, Any]) -> RunningToken:
    """``running_in`` in two calls, for the executor (which enters a job's scopes
    in one object: worker/executor.py); ``leave_running`` must follow."""
    bid = payload.get("batch")
    carried = callbacks_of(payload) if "batch_callbacks" in payload else None
    return _running.set((bid, carried) if isinstance(bid, str) else None)


def leave_running(token: RunningToken) -> None:
    _running.reset(token)


def batch_status(bid: str, client: Client | None = None) -> dict[str, Any] | None:
    """A batch's counters and state (see ``jobmaster.api.BatchInfo``); None if
    unknown or expired."""
    info = BatchSet(client or default_client()).get(bid)
    return info.as_dict() if info is not None else None
