"""One fetched job, read once: everything the worker needs to know about it.

A job's entry is decoded here and nowhere else on its way through the
worker. Reading it piecemeal (the payload decoded in one place, its
workflow step, lock and options worked out again wherever they were needed)
sent a job back and forth between modules and computed the same step up to
four times; a field read two ways could also disagree with itself.

What is read once:

- ``payload``: the wire fields (payload.py), checked by ``payload.decode``;
- ``function`` and ``arguments``: the registered job and its arguments
  (opened if sealed), or ``refused``, why it cannot run (buried as it is
  reached: after a cancelled batch's skip, as before);
- ``step``: its batch and chain (workflows/steps.py), None for a plain job;
- ``timeout``: the payload's (``.options()``), else the job's own;
- ``until_started`` / ``until_executed``: the unique lock it holds, by when
  it is released (as it starts, or by FINISH with its outcome);
- ``expires_at``: when it is too late to run (its ``expires_in``, expiry.py).
"""

from __future__ import annotations

from typing import Any, TypedDict, cast

from jobmaster import crypto, expiry, registry
from jobmaster import payload as wire
from jobmaster.frozen import frozen
from jobmaster.job_options import JobOptions
from jobmaster.registry import RegisteredJob
from jobmaster.unique import UNTIL_EXECUTED, UNTIL_STARTED
from jobmaster.worker.unit import Unit
from jobmaster.workflows.steps import Step, step_of


class WireFields(TypedDict):
    """The fields ``payload.decode`` guarantees (REQUIRED_FIELDS, and kwargs)."""

    jid: str
    job: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str


class Payload(WireFields, total=False):
    """A job's payload as the worker reads it. Values come from Redis, so the
    optional ones are checked where they are used (any may be forged)."""

    retry: object
    retry_count: object
    backoff: object
    timeout: object
    unique: object
    unique_digest: object
    batch: object
    chain: object
    created_at: object
    enqueued_at: object
    expires_in: object


Arguments = tuple[list[Any], dict[str, Any]]
NO_OPTIONS = JobOptions()


@frozen  # made for every job: frozen.py says why not @dataclass(frozen=True)
class FetchedJob:
    unit: Unit  # the entry as stored (FINISH names it) and its queue
    # Fields rather than properties of the payload and unit: read a dozen
    # times per job, a property's call cost about 1 µs of it (timeit).
    jid: str
    name: str  # the registered job name (the payload's "job")
    queue: str  # where it was fetched from
    payload: Payload
    function: RegisteredJob | None
    arguments: Arguments  # opened; the payload itself stays sealed
    refused: str | None  # why it cannot run: buried
    step: Step | None
    timeout: float | None
    until_started: str | None  # the lock released as it starts
    until_executed: str | None  # the lock FINISH releases or extends
    expires_at: float | None = None  # unix time; fetched later, it is not run

    @classmethod
    def read(cls, unit: Unit) -> FetchedJob:
        """Decode ``unit`` once; raises ``payload.BadPayload`` if it is no job at all."""
        payload = cast(Payload, unit.payload or wire.decode(unit.raw))
        function = registry.lookup(payload["job"])
        arguments: Arguments = ([], {})
        refused = None
        if function is None:
            refused = f"no job registered as {payload['job']!r}"
        else:
            try:  # opened if sealed; refused in clear for an encrypt=True job
                arguments = crypto.arguments(payload, sealed=function.job_options.encrypt)
            except wire.BadPayload as error:
                refused = str(error)
        lock = payload.get("unique_digest")
        mode = payload.get("unique")
        return cls(
            unit=unit,
            jid=payload["jid"],
            name=payload["job"],
            queue=unit.queue,
            payload=payload,
            function=function,
            arguments=arguments,
            refused=refused,
            step=step_of(payload),
            timeout=timeout_of(payload, function),
            until_started=lock if mode == UNTIL_STARTED and isinstance(lock, str) else None,
            until_executed=lock if mode == UNTIL_EXECUTED and isinstance(lock, str) else None,
            expires_at=expiry.expires_at(payload),
        )

    @property
    def raw(self) -> bytes:
        return self.unit.raw

    @property
    def options(self) -> JobOptions:
        """The registered job's options (defaults for a job not registered here)."""
        return self.function.job_options if self.function is not None else NO_OPTIONS

    @property
    def wire(self) -> dict[str, Any]:
        """The payload as the plain dict it is, for hooks and middleware (the same
        object: a change a hook makes is seen by the ones after it, as before)."""
        return cast(dict[str, Any], self.payload)

    def log_context(self) -> dict[str, Any]:
        """The fields of its per-job log lines (never its arguments)."""
        return {"jid": self.jid, "job": self.name, "queue": self.queue}


def timeout_of(payload: Payload, function: RegisteredJob | None) -> float | None:
    """The payload's ``timeout`` (from ``.options()``), else the job's own."""
    value = payload.get("timeout")
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return function.job_options.timeout if function is not None else None
