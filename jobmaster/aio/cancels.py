"""``jobmaster.acancel``: api/cancels.py on the asyncio client.

The same two steps, in the same order (api/cancels.py's docstring): the
request (CANCEL_REQUEST), then the removal of a job still waiting, from
where its status says it is (FIND_QUEUED a page at a time in a queue, ZSCAN
in the scheduled and retry sets), by CANCEL or CANCEL_STEP; with ``wait``,
the job's end is awaited as ``aresult`` awaits it. The calls and what
their replies mean are api/cancels.py's own functions.
"""

from __future__ import annotations

import redis

from jobmaster.aio import results
from jobmaster.aio.client import AsyncClient, async_client
from jobmaster.aio.scripts import run
from jobmaster.api.base import PAGE, glob_escape, texts
from jobmaster.api.cancels import (
    CANCELLABLE,
    CANCELLED,
    PLACES,
    Cancellation,
    decoded_entry,
    removal,
    request_call,
    request_refused,
    set_refused,
    unconfirmed,
)
from jobmaster.api.queues import FIND_PAGE
from jobmaster.api.records import SortedEntry
from jobmaster.client import Client
from jobmaster.errors import ResultPending, UnknownJob
from jobmaster.scripts import FindQueued
from jobmaster.tolerant import text, wrong_type


class AsyncCanceller:
    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def cancel(self, jid: str, wait: float = 0) -> Cancellation:
        """Cancel ``jid``; ``wait`` seconds for a running job's end (Canceller.cancel)."""
        client = self.client
        try:
            status, _ = await run(request_call(client.keys, jid), client.scripts.cancel_request)
        except redis.ResponseError as error:
            raise request_refused(error, client.keys) from error
        found = text(status) or None
        if found not in CANCELLABLE:
            return Cancellation(jid, False, found)
        for place in PLACES[found]:
            removed = (
                await self._from_queues(jid)
                if place == "queue"
                else await self._from_set(jid, place)
            )
            if removed:
                return Cancellation(jid, True, found, removed)
        if not wait or wait <= 0:
            return Cancellation(jid, True, found)
        try:
            end = await results.wait_end(client.redis, client.keys, jid, wait)
        except (ResultPending, UnknownJob) as error:
            return unconfirmed(jid, found, error)
        return Cancellation(jid, end.status == CANCELLED, found, ended_as=end.status)

    async def _from_set(self, jid: str, place: str) -> str | None:
        key: str = getattr(self.client.keys, place)  # keys.scheduled, keys.retry
        try:
            entry = await self._find(key, jid)
        except redis.ResponseError as error:
            set_refused(error, place, key, jid)
            return None
        if entry is None:
            return None
        return place if await self._remove(key, "zset", entry.raw, entry, jid) else None

    async def _find(self, key: str, jid: str) -> SortedEntry | None:
        """The set's entry of ``jid`` by ZSCAN (JobSet.find); None on a forged key."""
        try:
            async for member, score in self.client.redis.zscan_iter(
                key, match=f"*{glob_escape(jid)}*", count=PAGE
            ):
                entry = SortedEntry.from_member(member, score)
                if entry.jid == jid:
                    return entry
        except redis.ResponseError as error:
            if not wrong_type(error):
                raise
        return None

    async def _from_queues(self, jid: str) -> str | None:
        """Queue by queue, FIND_QUEUED a page at a time (api/queues.find_queued)."""
        client = self.client
        for name in texts(await client.redis.smembers(client.keys.queues)):
            key, start = client.keys.queue(name), 0
            while start >= 0:
                find = FindQueued(queue_key=key, jid=jid, start=start, size=FIND_PAGE, keep=0)
                reply = await run(find, client.scripts.find_queued)
                if len(reply) == 1:
                    start = int(reply[0])
                    continue
                raw = reply[1] if isinstance(reply[1], bytes) else str(reply[1]).encode()
                if await self._remove(key, "list", raw, None, jid):
                    return f"queue {name}"
                return None  # fetched as we looked: the request stops it
        return None

    async def _remove(
        self, source: str, kind: str, raw: bytes, entry: SortedEntry | None, jid: str
    ) -> bool:
        client = self.client
        payload = entry.payload if entry is not None else decoded_entry(raw)
        call, script = removal(client.keys, client.status_ttl, source, kind, raw, payload, jid)
        return bool(await run(call, getattr(client.scripts, script)))


async def acancel(jid: str, *, wait: float = 0, client: Client | None = None) -> bool:
    """``jobmaster.cancel`` on the asyncio client: a waiting job is removed at
    once (True); a running one is asked to stop; with ``wait`` (seconds), True
    only once its worker confirmed it. False if it already ended or is unknown.
    ``client``: a sync client whose Redis and namespace to use (default: the
    default client's)."""
    found = await AsyncCanceller(await async_client(client)).cancel(jid, wait)
    return found.cancelled
