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

``await jobmaster.achain(...)`` starts a chain from code on an event loop:
the same first payload and hash (``_Planned``), sent on the asyncio client.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis

from jobmaster import payload as wire
from jobmaster.aio.client import async_client
from jobmaster.client import Client, default_client
from jobmaster.connection import describe_error
from jobmaster.errors import EnqueueError
from jobmaster.keys import Keys
from jobmaster.workflows.signature import Signature, as_signature, signatures

CHAIN_TTL = 30 * 24 * 3600  # seconds a chain's hash is kept


def chain(
    *steps: Signature, on_failure: Signature | None = None, client: Client | None = None
) -> str:
    """Enqueue the first step now, the others each after its predecessor succeeded;
    returns the chain's id."""
    planned = _Planned.of(steps, on_failure)
    client = client or default_client()
    pipe = client.redis.pipeline(transaction=True)  # never a chain without its first step
    planned.hash_into(pipe, client.keys)
    with planned.pushing():
        planned.check(client.push_payloads([planned.first], pipe=pipe))
    return planned.cid


async def achain(
    *steps: Signature, on_failure: Signature | None = None, client: Client | None = None
) -> str:
    """``chain`` on the asyncio client (``client``: a sync client whose Redis and
    namespace to use; default: the default client's)."""
    planned = _Planned.of(steps, on_failure)
    aclient = await async_client(client)
    pipe = aclient.redis.pipeline(transaction=True)  # never a chain without its first step
    planned.hash_into(pipe, aclient.keys)
    with planned.pushing():
        planned.check(await aclient.push_payloads([planned.first], pipe=pipe))
    return planned.cid


@dataclass(frozen=True)
class _Planned:
    """A chain about to start: its id, its first step's payload, its hash."""

    cid: str
    first: dict[str, Any]
    sigs: list[Signature]

    @classmethod
    def of(cls, steps: tuple[Signature, ...], on_failure: Signature | None) -> _Planned:
        if not steps:
            raise TypeError("chain() needs at least one step (job.s(...))")
        sigs = signatures(steps, "chain step")
        failure = as_signature(on_failure, "on_failure") if on_failure is not None else None
        cid = wire.new_jid()
        rest = [sig.to_json() for sig in sigs[1:]]
        on_fail = failure.to_json() if failure is not None else None
        first = sigs[0].payload({"chain": link(cid, 1, len(sigs), rest, on_fail)})
        return cls(cid, first, sigs)

    def hash_into(self, pipe: Any, keys: Keys) -> None:
        """The chain's hash, on the MULTI pipeline its first step is pushed with."""
        pipe.hset(
            keys.chain(self.cid),
            mapping={
                "steps": len(self.sigs),
                "done": 0,
                "state": "running",
                "current": str(self.first["jid"]),
                "created_at": repr(time.time()),
                "jobs": ",".join(sig.job for sig in self.sigs),
            },
        )
        pipe.expire(keys.chain(self.cid), CHAIN_TTL)

    @contextlib.contextmanager
    def pushing(self) -> Iterator[None]:
        try:
            yield
        except redis.RedisError as error:
            reason = describe_error(error)
            raise EnqueueError(f"could not enqueue chain {self.cid}: {reason}") from error

    def check(self, pushed: list[dict[str, Any]]) -> None:
        if not pushed:
            raise EnqueueError(f"chain {self.cid}: a client middleware dropped its first step")


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
