"""The worker's side of workflows: what a job's end does to its chain or batch.

A payload in a workflow carries ``batch`` (the batch id) and/or ``chain``
(see chain.py). When such a job's outcome is recorded, FINISH_STEP is used
instead of FINISH, with the extra KEYS and ARGV built here: the batch event
(succeeded, failed, dead, skipped) and the chain's next job (the next step
after a success, the chain's ``on_failure`` after a failure for good), so
that the workflow moves in the same atomic step as the outcome.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from jobmaster import payload as wire
from jobmaster.keys import Keys
from jobmaster.scripts import WorkflowStep
from jobmaster.workflows.batch import BATCH_TTL, callback_targets, callbacks_of
from jobmaster.workflows.chain import link
from jobmaster.workflows.signature import Signature

log = logging.getLogger("jobmaster.workflows.steps")

# An outcome's kind -> the batch's event ('' for none: a deferred job did not run).
BATCH_EVENTS = {
    "done": "succeeded",
    "retry": "failed",
    "dropped": "failed",
    "dead": "dead",
    "skipped": "skipped",
    "cancelled": "failed",  # it will not run: a failure for good (jobmaster.cancel)
    "expired": "failed",  # it will never run: a failure for good (expiry.py)
}


@dataclass(frozen=True)
class Step:
    """The workflow a job belongs to, read from its payload."""

    batch: str | None
    chain: Mapping[str, Any] | None
    # The batch's callbacks, name -> (queue, jid), as the payload carries them
    # (``batch_callbacks``): FINISH_STEP must be given their keys to push one.
    callbacks: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # The payload's fields its chain's next job inherits (payload.CARRIED).
    carried: Mapping[str, Any] = field(default_factory=dict)


def step_of(payload: Mapping[str, Any]) -> Step | None:
    """The payload's batch and chain, if it is in one (malformed fields are ignored:
    the job still runs, as a job of no workflow)."""
    batch, chain = payload.get("batch"), payload.get("chain")
    if not (isinstance(batch, str) and batch and wire.key_safe(batch)):
        batch = None
    if not (isinstance(chain, Mapping) and wire.key_safe(chain.get("id"))):
        chain = None
    if not (batch or chain):
        return None
    carried = {name: payload[name] for name in wire.CARRIED if name in payload}
    return Step(batch, chain, callbacks_of(payload) if batch else {}, carried)


def cancelled(client: redis.Redis, keys: Keys, step: Step | None) -> bool:
    """Whether the job's batch was cancelled: then it is skipped, not run."""
    if step is None or step.batch is None:
        return False
    try:
        return bool(client.hexists(keys.batch(step.batch), "cancelled"))
    except redis.RedisError as error:
        # Run it: a cancel is best effort, and an outage must not bury a job.
        log.warning("could not read whether batch %s is cancelled: %s", step.batch, error)
        return False


@dataclass(frozen=True)
class FollowUp:
    """The chain's part of FINISH_STEP: its event and the job to push with it."""

    event: str = ""  # '' | 'next' | 'last' | 'failed'
    queue: str = ""
    jid: str = ""
    payload: bytes = b""


def follow_up(
    kind: str,
    chain: Mapping[str, Any] | None,
    now: float,
    carried: Mapping[str, Any] | None = None,
) -> FollowUp:
    """What a step's outcome does to its chain (pure: unit-tested without Redis).
    ``carried``: the step's fields its next job (or on_failure) inherits."""
    inherited = dict(carried or {})
    if chain is None or kind not in ("done", "dead", "dropped", "cancelled", "expired"):
        return FollowUp()
    cid = str(chain["id"])
    listed = chain.get("rest")
    rest: list[Any] = listed if isinstance(listed, list) else []
    failure = chain.get("on_failure")
    if kind == "done" and not rest:
        return FollowUp("last")
    if kind == "done":
        step, steps = _int(chain.get("step"), 1), _int(chain.get("steps"), len(rest) + 1)
        try:
            nxt = Signature.from_json(rest[0])
        except TypeError as error:
            log.error(
                "chain %s: step %d is not a valid signature (%s); the chain stops",
                cid,
                step + 1,
                error,
            )
        else:
            on_fail = failure if isinstance(failure, Mapping) else None
            field = link(cid, step + 1, steps, rest[1:], dict(on_fail) if on_fail else None)
            return _job("next", nxt.payload({**inherited, "chain": field}), now)
    # Failed for good (or its next step is unreadable): the chain stops here.
    if not isinstance(failure, Mapping):
        return FollowUp("failed")
    try:
        callback = Signature.from_json(failure).with_kwargs(chain_id=cid)
    except TypeError as error:
        log.error("chain %s: its on_failure is not a valid signature (%s)", cid, error)
        return FollowUp("failed")
    return _job("failed", callback.payload({**inherited, "callback_of": cid}), now)


def _job(event: str, payload: dict[str, Any], now: float) -> FollowUp:
    payload["enqueued_at"] = now
    return FollowUp(event, str(payload["queue"]), str(payload["jid"]), wire.encode(payload))


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def workflow_step(keys: Keys, kind: str, step: Step, status_on: bool) -> WorkflowStep:
    """The workflow part of FINISH_STEP and BURY_STEP (WorkflowStep in scripts.py)."""
    now = time.time()
    follow = follow_up(kind, step.chain, now, step.carried)
    batch = step.batch
    return WorkflowStep(
        queues_key=keys.queues,
        batch_key=keys.batch(batch) if batch else keys.batches,
        batch_failed_key=keys.batch_failed(batch) if batch else keys.batches,
        chain_key=keys.chain(str(step.chain["id"])) if step.chain is not None else keys.batches,
        follow_queue_key=keys.queue(follow.queue) if follow.jid else keys.batches,
        follow_status_key=keys.status(follow.jid) if follow.jid else keys.batches,
        callbacks=callback_targets(keys, step.callbacks),
        scheduled_key=keys.scheduled,
        dead_key=keys.dead,
        queue_prefix=keys.queue_prefix,
        wakeup_prefix=keys.wakeup_prefix,
        status_prefix=keys.status_prefix if status_on else "",
        batch_event=BATCH_EVENTS.get(kind, "") if batch else "",
        now=repr(now),
        chain_event=follow.event,
        follow_queue=follow.queue,
        follow_jid=follow.jid,
        follow_payload=follow.payload,
        failed_ttl=BATCH_TTL,
    )
