"""The asyncio producer client, one per event loop.

``AsyncClient`` pushes what the sync ``Client`` pushes (push_plans.py builds
both), on ``redis.asyncio``, to the Redis and namespace of a sync client:
the default one (``jobmaster.configure()``, the environment) or a job's own.
So ``aenqueue`` and ``enqueue`` never disagree on where a job goes.

One per event loop. An asyncio connection belongs to the loop it was
opened on: used from another loop it fails ("attached to a different
loop"). ``async_client()`` keeps one client per loop (and per sync client)
and closes them when the loop shuts down its async generators, as
``asyncio.run`` does before closing the loop, so a program that calls
``asyncio.run`` twice gets a new client the second time and leaks no socket.

Fork. A forked child must not use its parent's connections (their replies
would go to whichever process reads first), nor close them (a TLS close
would end the parent's session): after a fork the child forgets every
client it inherited, without closing one, and makes its own on first use.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import AsyncIterator, Iterable
from typing import Any

import redis.asyncio

from jobmaster import push_plans as plans
from jobmaster.aio import results
from jobmaster.aio.scripts import AsyncScripts, run
from jobmaster.client import Client, default_client
from jobmaster.connection import aconnect
from jobmaster.errors import JobmasterError
from jobmaster.keys import Keys
from jobmaster.push_plans import PushPlans


class AsyncClient(PushPlans):
    """Pushes jobs to one Redis and namespace, awaiting Redis on one event loop."""

    def __init__(self, connection: redis.asyncio.Redis, keys: Keys, status_ttl: int) -> None:
        self.redis = connection
        self.keys = keys
        self.status_ttl = status_ttl  # 0: status tracking off
        self.scripts = AsyncScripts(connection)

    @classmethod
    def like(cls, client: Client) -> AsyncClient:
        """An asyncio client to ``client``'s Redis (URL, credentials, TLS,
        Sentinel, embedded), namespace and status TTL; nothing is sent yet."""
        if client.target is None:
            raise JobmasterError(
                "the a* calls need a client made from a URL or a config "
                "(jobmaster.configure(...), Client(url), Client.from_config): one made "
                "around a redis.Redis of yours does not say how to open an asyncio "
                "connection to the same server"
            )
        return cls(aconnect(client.target), client.keys, client.status_ttl)

    async def aclose(self) -> None:
        await self.redis.aclose()

    # -- payloads, for the job API ---------------------------------------
    async def push_payloads(
        self, payloads: Iterable[dict[str, Any]], at: float | None = None, pipe: Any = None
    ) -> list[dict[str, Any]]:
        """``Client.push_payloads``, awaited: ``pipe`` is an asyncio MULTI pipeline."""
        batch = plans.before_push(payloads)
        if not batch:
            return []
        due = plans.due(at)
        try:
            if due is not None:
                schedule = self.redis.pipeline(transaction=True)
                self.schedule_into(schedule, batch, due)
                await schedule.execute()
            else:
                await self._push_now(batch, pipe)
        except redis.RedisError as error:
            raise plans.enqueue_error(batch, error, unsure=True) from error
        return batch

    async def push_unique(self, payload: dict[str, Any], ttl: int, at: float | None = None) -> bool:
        """``Client.push_unique``, awaited: True if pushed, False if a job holds its lock."""
        call = self.unique_call(payload, ttl, at)
        if call is None:
            return False
        try:
            return bool(await run(call, self.scripts.push_unique))
        except redis.RedisError as error:
            raise plans.enqueue_error([payload], error, unsure=True) from error

    async def _push_now(self, payloads: list[dict[str, Any]], pipe: Any = None) -> None:
        calls = self.grouped(payloads)
        if len(calls) == 1 and pipe is None:
            await run(self.push_call(*calls[0]), self.scripts.push)
            return
        queues = list(dict.fromkeys(queue for queue, _ in calls))
        if len(queues) > 1 or pipe is not None:  # PushPlans.check_types_into
            check = self.redis.pipeline(transaction=False)
            self.check_types_into(check, queues)
            self.wrong_type(queues, await check.execute())
        pipe = pipe or self.redis.pipeline(transaction=False)
        for queue, chunk in calls:
            await run(self.push_call(queue, chunk), self.scripts.push, client=pipe)
        await pipe.execute()

    # -- what became of a job ---------------------------------------------
    async def status(self, jid: str) -> str | None:
        return await results.status(self.redis, self.keys, jid)

    async def result(self, jid: str, wait: float = 0) -> Any:
        """``Client.result``, awaited: the wait holds no thread and no loop."""
        return await results.wait_for(self.redis, self.keys, jid, wait)


class _LoopClients:
    """The clients of one event loop, by the sync client each follows."""

    def __init__(self) -> None:
        self.by_client: weakref.WeakKeyDictionary[Client, AsyncClient] = weakref.WeakKeyDictionary()
        self.made: list[AsyncClient] = []  # every one, closed with the loop
        self.closer: AsyncIterator[None] | None = None
        self.pid = os.getpid()


_loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClients] = (
    weakref.WeakKeyDictionary()
)
_inherited: list[_LoopClients] = []  # a forked child's: kept, never used, never closed


def _forget_after_fork() -> None:
    _inherited.extend(_loops.values())
    _loops.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


async def async_client(client: Client | None = None) -> AsyncClient:
    """The asyncio client of the running loop for ``client`` (default: the
    default client, as ``enqueue`` uses)."""
    sync = client or default_client()
    loop = asyncio.get_running_loop()
    mine = _loops.get(loop)
    if mine is not None and mine.pid != os.getpid():  # a fork the hook did not see
        _forget_after_fork()
        mine = None
    if mine is None:
        mine = _loops[loop] = _LoopClients()
        mine.closer = _close_with_loop(mine)
        await anext(mine.closer)  # the loop now knows it: closed at its shutdown
    found = mine.by_client.get(sync)
    if found is None:
        found = mine.by_client[sync] = AsyncClient.like(sync)
        mine.made.append(found)
    return found


async def _close_with_loop(mine: _LoopClients) -> AsyncIterator[None]:
    """An async generator that waits for its loop's ``shutdown_asyncgens``
    (``asyncio.run`` calls it before closing the loop), then closes the
    loop's clients while the loop still runs: a connection left open on a
    closed loop can be closed by nobody."""
    try:
        yield
    finally:
        if mine.pid == os.getpid():  # an inherited loop's clients are the parent's
            for made in mine.made:
                await made.aclose()
            mine.made.clear()
            mine.by_client.clear()


async def aresult(jid: str, wait: float = 0, *, client: Client | None = None) -> Any:
    """``jobmaster.result`` on the asyncio client: the job's return value once it
    is complete, waiting up to ``wait`` seconds on its ended channel (the
    wait holds no thread and never blocks the loop). JobFailed, ResultPending,
    UnknownJob as ``result`` raises them. ``client``: a sync client whose
    Redis and namespace to use (default: the default client's)."""
    found = await async_client(client)
    return await found.result(jid, wait)
