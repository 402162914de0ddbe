"""jobmaster: Redis-backed background jobs for Python, run by a forking, supervising master.

The producer API::

    import jobmaster

    @jobmaster.job(queue="default", retry=25)
    def send_email(user_id: int, template: str) -> None: ...

    send_email.enqueue(42, "welcome")
    await send_email.aenqueue(42, "welcome")  # on an event loop
"""

from __future__ import annotations

from jobmaster.aio.cancels import acancel
from jobmaster.aio.client import aresult
from jobmaster.api import DeadSet, ProcessSet, Queue, RetrySet, ScheduledSet, Stats, redis_info
from jobmaster.api.cancels import cancel
from jobmaster.client import Client, attempts, configure, result, status
from jobmaster.current import JobInfo, current_job
from jobmaster.errors import (
    ConfigError,
    EnqueueError,
    EnqueueUnconfirmed,
    JobCancelled,
    JobFailed,
    JobmasterError,
    JobTimeout,
    Permanent,
    PoisonPill,
    ResultPending,
    UnknownJob,
)
from jobmaster.job import JobFunction, job
from jobmaster.lifecycle import on_child_start, on_child_stop, on_master_start
from jobmaster.workflows.batch import Batch, batch, batch_status, current_batch
from jobmaster.workflows.chain import achain, chain, chain_status
from jobmaster.workflows.signature import Signature

__all__ = [
    "Batch",
    "Client",
    "ConfigError",
    "DeadSet",
    "EnqueueError",
    "EnqueueUnconfirmed",
    "JobCancelled",
    "JobFailed",
    "JobFunction",
    "JobInfo",
    "JobTimeout",
    "JobmasterError",
    "Permanent",
    "PoisonPill",
    "ProcessSet",
    "Queue",
    "ResultPending",
    "RetrySet",
    "ScheduledSet",
    "Signature",
    "Stats",
    "UnknownJob",
    "acancel",
    "achain",
    "aresult",
    "attempts",
    "batch",
    "batch_status",
    "cancel",
    "chain",
    "chain_status",
    "configure",
    "current_batch",
    "current_job",
    "job",
    "on_child_start",
    "on_child_stop",
    "on_master_start",
    "redis_info",
    "result",
    "status",
]
__version__ = "0.1.0"
