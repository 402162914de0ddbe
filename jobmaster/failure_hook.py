"""Running ``on_failure`` for jobs buried by a supervisor, which runs no job code.

(Named for this one job: "hooks" is left to the process lifecycle hooks, and
the per-job ``before_*``/``after_*`` hooks are middleware, middleware/base.py.)

A job that keeps killing its worker (a poison pill) is buried by the master
or by a child being recycled; neither may call the job's hook. They enqueue
``jobmaster.on_failure`` instead, a job registered here in every worker,
which looks the buried job up by its registered name and calls its hook
with a ``PoisonPill`` error. Nothing is imported by a name read from Redis.
"""

from __future__ import annotations

import logging
from typing import Any

from jobmaster import registry
from jobmaster.errors import PoisonPill
from jobmaster.job import job

log = logging.getLogger("jobmaster.failure_hook")

ON_FAILURE = "jobmaster.on_failure"


@job(name=ON_FAILURE, retry=3)
def run_failure_hook(payload: dict[str, Any], reason: str) -> None:
    target = registry.lookup(payload.get("job"))
    if target is None or target.job_options.on_failure is None:
        return
    target.job_options.on_failure(payload, PoisonPill(reason))
