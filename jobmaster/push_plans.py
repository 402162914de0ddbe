"""What a push sends, built in one place for both producer clients.

The sync ``Client`` (client.py) and the asyncio one (aio/client.py) differ
only in how they send: one blocks, the other awaits. Everything else, the
client middleware, the ``enqueued_at`` stamp, the grouping by queue, the
script calls with their KEYS and ARGV, the scheduled set's commands and
the errors a caller sees, is here, so that ``enqueue`` and ``aenqueue``
land the same payloads and fail the same way.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import redis

from jobmaster import payload as wire
from jobmaster import results
from jobmaster.connection import describe_error
from jobmaster.errors import EnqueueError, EnqueueUnconfirmed
from jobmaster.keys import Keys
from jobmaster.middleware import base as middleware
from jobmaster.pusher import LostReply
from jobmaster.scripts import Push, PushUnique

BULK_CHUNK = 1000  # payloads per PUSH call: one round trip per chunk


def due(at: float | None) -> float | None:
    """``at`` if a push at ``at`` goes to the scheduled set; None: it goes to its
    queue now (no time, or a time in the past)."""
    return float(at) if at is not None and float(at) > time.time() else None


def before_push(payloads: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The payloads the client middleware keeps (``before_enqueue`` may drop one)."""
    return [p for p in map(middleware.before_enqueue, payloads) if p is not None]


def _names(batch: list[dict[str, Any]]) -> str:
    return ", ".join(sorted({str(p.get("job")) for p in batch}))


def enqueue_error(
    batch: list[dict[str, Any]], error: redis.RedisError, *, unsure: bool = False
) -> EnqueueError:
    """Redis's error as the caller sees it (raised ``from error``):
    ``EnqueueUnconfirmed`` when the push may have run (its reply was lost),
    ``EnqueueError`` otherwise. (A function, not a context manager: that
    would cost a microsecond on every push.)

    ``unsure``: every connection error is a lost reply (the asyncio client
    cannot tell one sent from one not sent; neither is ever re-sent)."""
    lost = (redis.ConnectionError, redis.TimeoutError) if unsure else LostReply
    if isinstance(error, lost):
        jids = [str(p.get("jid")) for p in batch]
        return EnqueueUnconfirmed(
            f"enqueue of {_names(batch)} (jid {', '.join(jids)}) unconfirmed: {error}; "
            "its status tells whether it landed (jobmaster status JID)",
            jids,
        )
    return EnqueueError(f"could not enqueue {_names(batch)}: {describe_error(error)}")


class PushPlans:
    """The calls a push makes, for a client with ``keys`` and ``status_ttl``."""

    keys: Keys
    status_ttl: int  # 0: status tracking off

    def grouped(self, payloads: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
        """Payloads to push now, stamped ``enqueued_at``, as (queue, chunk) calls."""
        if len(payloads) == 1:  # one job, as enqueue() pushes: no grouping
            payloads[0]["enqueued_at"] = time.time()
            return [(str(payloads[0]["queue"]), payloads)]
        now = time.time()
        by_queue: dict[str, list[dict[str, Any]]] = {}
        for payload in payloads:
            payload["enqueued_at"] = now
            by_queue.setdefault(str(payload["queue"]), []).append(payload)
        return [
            (queue, batch[start : start + BULK_CHUNK])
            for queue, batch in by_queue.items()
            for start in range(0, len(batch), BULK_CHUNK)
        ]

    def push_call(self, queue: str, chunk: list[dict[str, Any]]) -> Push:
        status = [self.keys.status(str(p["jid"])) for p in chunk] if self.status_ttl else []
        return Push(
            queue_key=self.keys.queue(queue),
            queues_key=self.keys.queues,
            queue=queue,
            wakeup_channel=self.keys.wakeup_channel(queue),
            status_ttl=self.status_ttl,
            payloads=[wire.encode(p) for p in chunk],
            status_keys=status,
        )

    def check_types_into(self, pipe: Any, queues: list[str]) -> None:
        """Queue a TYPE of each queue's key on ``pipe``; ``wrong_type`` reads the replies.

        PUSH refuses a queue key of another type before any write, but only
        its own: the other calls of a multi-queue push, or a pipe's own
        commands (a chain's hash), would land without it. So their keys are
        read first."""
        for queue in queues:
            pipe.type(self.keys.queue(queue))

    def wrong_type(self, queues: list[str], replies: list[Any]) -> None:
        """Raise, naming the key, if one of ``queues`` holds another type than a list."""
        for queue, held in zip(queues, replies, strict=True):
            kind = held.decode() if isinstance(held, bytes) else str(held)
            if kind not in ("list", "none"):
                key = self.keys.queue(queue)
                raise redis.ResponseError(f"WRONGTYPE {key} holds a {kind}: nothing pushed")

    def schedule_into(self, pipe: Any, payloads: list[dict[str, Any]], at: float) -> None:
        """The scheduled set's commands, on a MULTI pipeline (never a status without its job)."""
        ttl = results.waiting_ttl(self.status_ttl, at, time.time())
        for start in range(0, len(payloads), BULK_CHUNK):
            chunk = payloads[start : start + BULK_CHUNK]
            pipe.zadd(self.keys.scheduled, {wire.encode(p): at for p in chunk})
            if self.status_ttl:
                for payload in chunk:
                    pipe.set(self.keys.status(str(payload["jid"])), "scheduled", ex=ttl)

    def unique_call(
        self, payload: dict[str, Any], ttl: int, at: float | None = None
    ) -> PushUnique | None:
        """The PUSH_UNIQUE call of one unique job (after the client middleware);
        None if the middleware dropped it."""
        changed = middleware.before_enqueue(payload)
        if changed is None:
            return None
        payload = changed
        queue, jid = str(payload["queue"]), str(payload["jid"])
        later = due(at) is not None
        payload["enqueued_at"] = time.time()
        return PushUnique(
            lock_key=self.keys.unique(str(payload["unique_digest"])),
            target_key=self.keys.scheduled if later else self.keys.queue(queue),
            queues_key=self.keys.queues,
            status_key=self.keys.status(jid),
            jid=jid,
            lock_ttl=ttl,
            payload=wire.encode(payload),
            target_kind="zset" if later else "queue",
            score=float(at or 0),
            queue=queue,
            wakeup_channel=self.keys.wakeup_channel(queue),
            # A scheduled one's status lives through its wait, then status_ttl.
            status_ttl=results.waiting_ttl(self.status_ttl, float(at or 0), time.time())
            if later and self.status_ttl
            else self.status_ttl,
        )
