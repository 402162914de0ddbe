"""Chains: jobs that run one after the other, each only if the previous succeeded.

::

    cid = jobmaster.chain(fetch.s(url), parse.s(), store.s(), on_failure=alert.s())

The first step is enqueued at once; the rest travel in its payload, in the
``chain`` field ``{"id", "step", "steps", "rest": [signature...], "on_failure":
signature | null}``. When a step succeeds, the FINISH_STEP script that records
its success pushes the next step in the same atomic step (steps.py builds
it), so a crash can neither skip a step nor run one twice over. A step that
fails for good (dead, or failed with retry off) stops the chain: the job's
own ``on_failure`` hook runs as for any job, and the chain's ``on_failure``
signature is enqueued with ``chain_id=`` added. A step waiting for a retry is
not a failure yet.

Each chain has a hash (keys.chain) with ``steps``, ``done``, ``state``
(running, succeeded, failed) and the ``current`` step's jid:
``jobmaster.chain_status(cid)``.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from jobmaster import payload as wire
from jobmaster.client import Client, default_client
from jobmaster.connection import describe_error
from jobmaster.errors import EnqueueError
from jobmaster.workflows.signature import Signature, as_signature, signatures

CHAIN_TTL = 30 * 24 * 3600  # seconds a chain's hash is kept


def chain(
    *steps: Signature, on_failure: Signature | None = None, client: Client | None = None
) -> str:
    """Enqueue the first step now, the others each after its predecessor succeeded;
    returns the chain's id."""
    if not steps:
        raise TypeError("chain() needs at least one step (job.s(...))")
    sigs = signatures(steps, "chain step")
    failure = as_signature(on_failure, "on_failure") if on_failure is not None else None
    cid = wire.new_jid()
    rest = [sig.to_json() for sig in sigs[1:]]
    on_fail = failure.to_json() if failure is not None else None
    first = sigs[0].payload({"chain": link(cid, 1, len(sigs), rest, on_fail)})
    client = client or default_client()
    pipe = client.redis.pipeline(transaction=True)  # never a chain without its first step
    pipe.hset(
        client.keys.chain(cid),
        mapping={
            "steps": len(sigs),
            "done": 0,
            "state": "running",
            "current": str(first["jid"]),
            "created_at": repr(time.time()),
            "jobs": ",".join(sig.job for sig in sigs),
        },
    )
    pipe.expire(client.keys.chain(cid), CHAIN_TTL)
    try:
        pushed = client.push_payloads([first], pipe=pipe)
    except redis.RedisError as error:
        raise EnqueueError(f"could not enqueue chain {cid}: {describe_error(error)}") from error
    if not pushed:
        raise EnqueueError(f"chain {cid}: a client middleware dropped its first step")
    return cid


def link(
    cid: str, step: int, steps: int, rest: list[Any], on_failure: dict[str, Any] | None
) -> dict[str, Any]:
    """The ``chain`` field of step ``step`` (1-based) of ``steps``; ``rest`` and
    ``on_failure`` are signatures in their JSON form."""
    return {"id": cid, "step": step, "steps": steps, "rest": rest, "on_failure": on_failure}


def chain_status(cid: str, client: Client | None = None) -> dict[str, Any] | None:
    """``{"id", "steps", "done", "state", "current", "created_at", ...}``; None if
    unknown or expired."""
    client = client or default_client()
    raw = client.redis.hgetall(client.keys.chain(cid))
    if not raw:
        return None
    found = {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in raw.items()
    }
    status: dict[str, Any] = {"id": cid, **found}
    for name in ("steps", "done"):
        status[name] = int(status.get(name, 0))
    for name in ("created_at", "finished_at"):
        if name in status:
            status[name] = float(status[name])
    return status
