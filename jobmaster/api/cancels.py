"""Cancelling a job: ``jobmaster.cancel(jid)``, ``jobmaster cancel JID``, the
dashboard's Cancel buttons.

Two steps, in this order:

1. The request (CANCEL_REQUEST): if the job's status says it has not ended,
   its jid joins the cancels set and is published on the cancel channel,
   checked and written in one step. Every worker process hears the message
   at once, and reads what is new in the set once a second in case it
   missed one (one subscription and one call per process, however many jobs
   it runs: worker/cancels.py), so a job running on any host, or fetched but
   not started yet, is stopped there.
2. The removal: a job still waiting is taken out of where its status says it
   is (the scheduled or retry set, found by ZSCAN like the sets' own
   commands; a queue, searched a page at a time inside Redis by FIND_QUEUED,
   so a long queue never crosses the wire) and removed with CANCEL, which
   acts only if the exact entry is still there. A job fetched or moved by a
   poller between the two is caught by the request instead.

The request comes first so that no move between the two steps lets a job
slip through: wherever the job is when the removal misses it, the request
is already waiting for it.

What ``cancel`` returns. True when the job was removed from where it waited:
it will not run. False when it had already ended or is unknown (no status:
never seen, expired, or status tracking off). A job that was not found
waiting (running, or fetched and about to start) may still end on its own
before the request reaches it, so:

- with ``wait`` (seconds), ``cancel`` waits for the job's end (its ended
  channel, as ``result(wait=)`` does: results.py) and returns True only if
  it ended ``cancelled`` (the worker confirmed the interruption); False if
  it ended otherwise first (complete, failed...) or has not ended in time
  (``pending``: the request stays, it may still stop);
- without ``wait``, True means the request was made: the job stops where it
  runs within a moment, unless it ends first. The CLI and the dashboard's
  buttons wait (``CONFIRM_WAIT``), so what they say is what happened.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import redis

from jobmaster import payload as wire
from jobmaster import results
from jobmaster.api.base import Backend, Connection
from jobmaster.api.queues import find_queued
from jobmaster.api.sorted_sets import JobSet, RetrySet, ScheduledSet
from jobmaster.errors import ResultPending, UnknownJob
from jobmaster.keys import Keys
from jobmaster.scripts import Cancel, CancelRequest, CancelStep
from jobmaster.tolerant import refused, text
from jobmaster.unique import MODES
from jobmaster.workflows.steps import step_of, workflow_step

log = logging.getLogger("jobmaster.api.cancels")

CANCELLED = "cancelled"  # the status of a cancelled job
REQUEST_TTL = 7 * 24 * 3600  # seconds a request waits for its job (a requeued one may come late)
MAX_REQUESTS = 10_000  # requests kept: a flood costs a bounded set
FUTURE = 60.0  # a request scored this far ahead of Redis's clock is forged (failover skew is less)
CONFIRM_WAIT = 5.0  # seconds the CLI and the dashboard wait for a running job's end

# Where a job may wait, by its status, in the order to look: a poller may
# have moved a due job from its set to its queue since the status was read.
PLACES = {
    "queued": ("queue",),
    "scheduled": ("scheduled", "queue"),
    "retrying": ("retry", "queue"),
    "working": (),
}
CANCELLABLE = frozenset(PLACES)  # the statuses of a job that has not ended


@dataclass(frozen=True)
class Cancellation:
    """What ``cancel`` found and did."""

    jid: str
    cancelled: bool  # the job will not run (on)
    status: str | None  # its status when asked (None: unknown)
    removed_from: str | None = None  # "queue NAME", "scheduled", "retry"; None: not waiting
    ended_as: str | None = None  # waited: the status it ended with
    pending: bool = False  # waited: it had not ended in time (the request stays)

    def __bool__(self) -> bool:
        return self.cancelled

    def as_dict(self) -> dict[str, Any]:
        return {
            "jid": self.jid,
            "cancelled": self.cancelled,
            "status": self.status,
            "removed_from": self.removed_from,
            "ended_as": self.ended_as,
            "pending": self.pending,
        }

    def describe(self) -> str:
        """One line for the CLI and the dashboard."""
        if self.removed_from:
            said = f"cancelled (removed from {self.removed_from})"
        elif self.cancelled:
            said = (
                "cancelled (the worker stopped it)"
                if self.ended_as
                else "cancel sent; it stops where it runs, unless it ends first"
            )
        elif self.pending:
            said = f"cancel sent, not confirmed: still {self.status} (it may stop later)"
        elif self.ended_as:
            said = f"not cancelled, it ended first ({self.ended_as})"
        elif self.status:
            said = f"not cancelled, it has already ended ({self.status})"
        else:
            said = "not cancelled, no such job (unknown, or its status expired)"
        return f"{self.jid}: {said}"


class Canceller:
    def __init__(self, connection: Connection = None, *, namespace: str | None = None) -> None:
        self.backend = Backend.resolve(connection, namespace)

    def cancel(self, jid: str, wait: float = 0) -> Cancellation:
        """Cancel ``jid``; ``wait`` seconds for a running job's end (module docstring)."""
        keys = self.backend.keys
        try:
            status, _ = request_call(keys, jid).run(self.backend.scripts.cancel_request)
        except redis.ResponseError as error:  # NOPERM: say which grant the recipe has
            raise request_refused(error, keys) from error
        found = text(status) or None
        if found not in CANCELLABLE:
            return Cancellation(jid, False, found)
        for place in PLACES[found]:
            removed = self._from_queues(jid) if place == "queue" else self._from_set(jid, place)
            if removed:
                return Cancellation(jid, True, found, removed)
        if not wait or wait <= 0:
            return Cancellation(jid, True, found)
        return self._confirmed(jid, found, wait)

    def _confirmed(self, jid: str, found: str, wait: float) -> Cancellation:
        """Wait for the job's end: True only if it ended cancelled."""
        try:
            end = results.wait_end(self.backend.redis, self.backend.keys, jid, wait)
        except (ResultPending, UnknownJob) as error:
            return unconfirmed(jid, found, error)
        return Cancellation(jid, end.status == CANCELLED, found, ended_as=end.status)

    def _from_set(self, jid: str, place: str) -> str | None:
        job_set: JobSet = (ScheduledSet if place == "scheduled" else RetrySet)(self.backend)
        try:
            entry = job_set.find(jid)  # None too when the set's key was forged
        except redis.ResponseError as error:
            set_refused(error, place, job_set.key, jid)
            return None
        if entry is None:
            return None
        return place if self._remove(job_set.key, "zset", entry.raw, entry.payload, jid) else None

    def _from_queues(self, jid: str) -> str | None:
        found = find_queued(self.backend, jid, keep=0)  # whole: CANCEL removes that entry
        if found is None:
            return None
        queue, raw, _ = found
        if self._remove(queue.key, "list", raw, decoded_entry(raw), jid):
            return f"queue {queue.name}"
        return None  # fetched as we looked: the request stops it

    def _remove(
        self, source: str, kind: str, raw: bytes, payload: dict[str, Any] | None, jid: str
    ) -> bool:
        """One CANCEL (or CANCEL_STEP: ``removal``), only if ``raw`` is still in ``source``."""
        backend = self.backend
        call, script = removal(backend.keys, backend.status_ttl, source, kind, raw, payload, jid)
        return bool(call.run(getattr(backend.scripts, script)))


# What the sync Canceller and the asyncio one (aio/cancels.py) share: the
# calls they send and what the replies mean.
def request_call(keys: Keys, jid: str) -> CancelRequest:
    """The cancel request of ``jid`` (step 1 of the module's docstring)."""
    return CancelRequest(
        status_key=keys.status(jid),
        cancels_key=keys.cancels,
        cancelled_key=keys.stat(CANCELLED),
        jid=jid,
        keep_for=REQUEST_TTL,
        most=MAX_REQUESTS,
        future=FUTURE,
        channel=keys.cancel_channel,
    )


def request_refused(error: redis.ResponseError, keys: Keys) -> Exception:
    """A refused request as raised: a NOPERM says which grant the recipe has."""
    return refused(error, "the cancel request", _grants(keys))


def unconfirmed(jid: str, found: str, error: ResultPending | UnknownJob) -> Cancellation:
    """A wait for the job's end that ended without it: pending, or its status
    expired as we waited (nothing confirmed)."""
    return Cancellation(jid, False, found, pending=isinstance(error, ResultPending))


def set_refused(error: redis.ResponseError, place: str, key: str, jid: str) -> None:
    """Raise a refused read of a set, but for the producer's user's NOPERM on
    the retry set (docs/redis-deployment.md): the request made before stops
    the job when it is due and fetched."""
    if place != "retry" or not isinstance(error, redis.exceptions.NoPermissionError):
        raise refused(error, key, "~" + key) from error
    log.info("cancel of jid=%s: the retry set is not this user's, the request stops it", jid)


def removal(
    keys: Keys,
    status_ttl: int,
    source: str,
    kind: str,
    raw: bytes,
    payload: dict[str, Any] | None,
    jid: str,
) -> tuple[Cancel | CancelStep, str]:
    """The CANCEL call that removes ``raw`` from ``source`` (a "list" or a
    "zset"), and the name of its script: CANCEL_STEP for a batch or chain job
    (the batch counts a failure, the chain stops)."""
    lock = _unique_lock(payload)
    call = Cancel(
        source_key=source,
        status_key=keys.status(jid),
        lock_key=keys.unique(lock or "-"),
        source_kind=kind,
        entry=raw,
        status=CANCELLED if status_ttl else "",
        unlock_jid=jid if lock else "",
        status_ttl=status_ttl or 1,
        # wakes a jobmaster.result waiting on it (results.py)
        ended_channel=keys.ended_channel(jid) if status_ttl else "",
    )
    step = step_of(payload) if payload is not None else None
    if step is None:
        return call, "cancel"
    flow = workflow_step(keys, CANCELLED, step, bool(status_ttl))
    return CancelStep(call, flow, jid), "cancel_step"


def _grants(keys: Keys) -> str:
    """What the cancel request needs of the ACL (the producer's recipe has it)."""
    return (
        f"~{keys.status('*')}, ~{keys.cancels}, ~{keys.stat(CANCELLED)} and &{keys.cancel_channel}"
    )


def decoded_entry(raw: bytes) -> dict[str, Any] | None:
    try:
        return wire.decode(raw)
    except wire.BadPayload:
        return None


def _unique_lock(payload: dict[str, Any] | None) -> str | None:
    """The unique lock a cancelled job frees (it will not run), if it holds one."""
    if payload is None or payload.get("unique") not in MODES:
        return None
    lock = payload.get("unique_digest")
    return lock if isinstance(lock, str) and wire.key_safe(lock) else None


def cancel(jid: str, connection: Connection = None, *, wait: float = 0) -> bool:
    """Stop job ``jid``. A waiting job is removed at once (True); a running one
    gets ``jobmaster.JobCancelled`` raised in its thread as soon as its worker
    hears the request. With ``wait`` (seconds) a running job's answer is True
    only once its worker confirmed the interruption (False if it ended
    otherwise first, or not in time); without, True means the request is
    made. False if it already ended or is unknown."""
    return Canceller(connection).cancel(jid, wait).cancelled
