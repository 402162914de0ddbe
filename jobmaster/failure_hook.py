"""Running ``on_failure`` for jobs buried by a supervisor, which runs no job code.

(Named for this one job: "hooks" is left to the process lifecycle hooks, and
the per-job ``before_*``/``after_*`` hooks are middleware, middleware/base.py.)

A job that keeps killing its worker (a poison pill) is buried by the master
or by a child being recycled; neither may call the job's hook. They enqueue
``jobmaster.on_failure`` instead, a job registered here in every worker,
which looks the buried job up by its registered name and calls its hook
with a ``PoisonPill`` error. Nothing is imported by a name read from Redis.

Integrations that report deaths (contrib/sentry.py) hear of these ones
through ``on_buried``: no job code saw them end, so no middleware did. With
a listener installed, the hook job is queued for every such death, hook or
not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from jobmaster import registry
from jobmaster.errors import PoisonPill
from jobmaster.job import job

log = logging.getLogger("jobmaster.failure_hook")

ON_FAILURE = "jobmaster.on_failure"

BuriedListener = Callable[[dict[str, Any], PoisonPill], None]
_listeners: list[BuriedListener] = []


def on_buried(listener: BuriedListener) -> None:
    """Call ``listener(payload, PoisonPill)`` in the worker that runs the hook of
    each job a supervisor buried (once per listener, however often added)."""
    if listener not in _listeners:
        _listeners.append(listener)


def listened() -> bool:
    """Whether a listener wants to hear of every buried job (recovery.py)."""
    return bool(_listeners)


@job(name=ON_FAILURE, retry=3)
def run_failure_hook(payload: dict[str, Any], reason: str) -> None:
    error = PoisonPill(reason)
    for listener in list(_listeners):
        try:
            listener(payload, error)
        except Exception:  # one integration's bug must not cost the job's own hook
            log.exception("a listener of buried jobs failed for jid=%s", payload.get("jid"))
    target = registry.lookup(payload.get("job"))
    if target is None or target.job_options.on_failure is None:
        return
    target.job_options.on_failure(payload, error)
