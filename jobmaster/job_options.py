"""How a job is enqueued and retried: the options of ``@jobmaster.job``, validated when set.

Apart from job.py so that the registry (which the worker reads a job's
options from) and the worker's outcome code need the options, not the
whole job API with its client: registry.py sits below job.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from jobmaster.backoff import DEFAULT_RETRY, Backoff
from jobmaster.expiry import check_expires_in
from jobmaster.middleware.base import Middleware
from jobmaster.queue_names import queue_name
from jobmaster.unique import UniqueArgs, check_mode


def check_result_ttl(value: object) -> None:
    """Whole seconds are what Redis's EX keeps; less than one would keep nothing."""
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value < math.inf
    ):
        raise ValueError(f"result_ttl must be seconds >= 1, got {value!r}")


@dataclass(frozen=True)
class JobOptions:
    """How a job is enqueued and retried; validated when set."""

    queue: str = "default"
    retry: int | bool = DEFAULT_RETRY
    backoff: Backoff | None = None
    timeout: float | None = None
    unique: Any = None  # "until_executed" | "until_started" | seconds (see unique.py)
    unique_args: UniqueArgs | None = None
    middleware: tuple[Middleware, ...] = ()  # server middleware for this job only
    encrypt: bool = False  # arguments sealed with secret_key (crypto.py)
    # Seconds its status and result are kept once it ended (status_ttl when None).
    result_ttl: float | None = None
    expires_in: float | None = None  # seconds from creation; not run if fetched later (expiry.py)
    # Called once the outcome is recorded: on_success(payload) after a success,
    # on_failure(payload, error) when the job failed for good (dead, or
    # dropped with retry=False). A hook that raises is logged, nothing more.
    on_success: Callable[[dict[str, Any]], Any] | None = None
    on_failure: Callable[[dict[str, Any], BaseException], Any] | None = None

    def __post_init__(self) -> None:
        try:
            queue_name(self.queue)
        except ValueError as error:
            raise ValueError(f"queue {error}") from None
        if self.retry is True:
            object.__setattr__(self, "retry", DEFAULT_RETRY)
        elif self.retry is not False and (not isinstance(self.retry, int) or self.retry < 0):
            raise ValueError(f"retry must be an integer >= 0 or False, got {self.retry!r}")
        if self.backoff is not None and not callable(self.backoff):
            if isinstance(self.backoff, bool) or not isinstance(self.backoff, int | float):
                raise ValueError(f"backoff must be seconds or a callable, got {self.backoff!r}")
            if self.backoff < 0:
                raise ValueError(f"backoff must be >= 0 seconds, got {self.backoff!r}")
        if self.timeout is not None and (
            isinstance(self.timeout, bool)
            or not isinstance(self.timeout, int | float)
            or self.timeout <= 0
        ):
            raise ValueError(f"timeout must be seconds > 0, got {self.timeout!r}")
        check_result_ttl(self.result_ttl)
        check_mode(self.unique)
        check_expires_in(self.expires_in)
        object.__setattr__(self, "middleware", tuple(self.middleware))
        for item in self.middleware:
            if not isinstance(item, Middleware):
                raise ValueError(f"middleware must be Middleware instances, got {item!r}")
        if self.unique_args is not None and not callable(self.unique_args):
            raise ValueError(f"unique_args must be a callable, got {self.unique_args!r}")
        for hook in ("on_success", "on_failure"):
            if getattr(self, hook) is not None and not callable(getattr(self, hook)):
                raise ValueError(f"{hook} must be a callable, got {getattr(self, hook)!r}")

    def payload_fields(self) -> dict[str, Any]:
        """The options a worker must see, as wire fields (callables stay in the registry)."""
        extra: dict[str, Any] = {}
        if self.backoff is not None and not callable(self.backoff):
            extra["backoff"] = self.backoff
        if self.timeout is not None:
            extra["timeout"] = self.timeout
        if self.result_ttl is not None:
            extra["result_ttl"] = self.result_ttl
        if self.expires_in is not None:
            extra["expires_in"] = self.expires_in
        return extra


OPTION_NAMES = frozenset(f.name for f in fields(JobOptions))
