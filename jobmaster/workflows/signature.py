"""A signature: a job, its arguments and options, as JSON.

``send_email.s(42, "welcome")`` describes a call without making it, so that a
chain can store its later steps in its first job's payload and a batch its
callbacks in Redis: both are enqueued later, possibly by a worker on another
host, from this JSON alone. The JSON form is a payload without its jid and
times: ``{"job", "args", "kwargs", "queue", "retry", ...options}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobmaster import payload as wire

# Payload fields a signature may carry besides job, args and kwargs.
OPTION_FIELDS = ("queue", "retry", "backoff", "timeout", "result_ttl", "expires_in")


@dataclass(frozen=True)
class Signature:
    """A job call as data: ``job`` (its registered name), arguments, options."""

    job: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)  # OPTION_FIELDS

    def __post_init__(self) -> None:
        if not isinstance(self.job, str) or not self.job:
            raise TypeError("a signature's job must be the job's registered name (a string)")
        unknown = set(self.options) - set(OPTION_FIELDS)
        if unknown:
            names = ", ".join(sorted(unknown))
            raise TypeError(f"{self.job}: signatures take no option(s) {names}")
        wire.check_arguments(self.job, self.args, self.kwargs)
        wire.check_json(dict(self.options), f"{self.job}: options")

    @property
    def queue(self) -> str:
        return str(self.options.get("queue", "default"))

    def with_kwargs(self, **more: Any) -> Signature:
        """The same call with more keyword arguments (a callback's ``batch_id``)."""
        return Signature(self.job, self.args, {**self.kwargs, **more}, self.options)

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            **self.options,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Signature:
        """From ``to_json``'s form; TypeError naming what is wrong with it."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a signature must be a JSON object, got {type(data).__name__}")
        args, kwargs = data.get("args", []), data.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, Mapping):
            raise TypeError(f"signature of {data.get('job')!r}: bad args or kwargs")
        options = {name: data[name] for name in OPTION_FIELDS if name in data}
        job = data.get("job")
        if not isinstance(job, str):
            raise TypeError(f"a signature's job must be a name (a string), got {job!r}")
        return cls(job, tuple(args), dict(kwargs), options)

    def payload(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A new payload (fresh jid) for this call, plus ``extra`` fields."""
        fields = {k: v for k, v in self.options.items() if k not in ("queue", "retry")}
        return wire.build(
            self.job,
            self.args,
            self.kwargs,
            queue=self.queue,
            retry=self.options.get("retry"),
            extra={**fields, **(extra or {})},
        )


def as_signature(value: object, what: str) -> Signature:
    """``value`` if it is a signature; TypeError naming ``what`` otherwise."""
    if not isinstance(value, Signature):
        raise TypeError(f"{what} must be a signature (job.s(...)), got {value!r}")
    return value


def signatures(values: Sequence[object], what: str) -> list[Signature]:
    return [as_signature(value, f"{what} {index}") for index, value in enumerate(values)]
