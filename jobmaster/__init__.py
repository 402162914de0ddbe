"""jobmaster: Redis-backed background jobs for Python, run by a forking, supervising master.

The producer API::

    import jobmaster

    @jobmaster.job(queue="default", retry=25)
    def send_email(user_id: int, template: str) -> None: ...

    send_email.enqueue(42, "welcome")
"""

from __future__ import annotations

from jobmaster.client import Client, attempts, configure, status
from jobmaster.errors import (
    ConfigError,
    EnqueueError,
    JobmasterError,
    JobTimeout,
    Permanent,
    PoisonPill,
)
from jobmaster.job import JobFunction, job

__all__ = [
    "Client",
    "ConfigError",
    "EnqueueError",
    "JobFunction",
    "JobTimeout",
    "JobmasterError",
    "Permanent",
    "PoisonPill",
    "attempts",
    "configure",
    "job",
    "status",
]
__version__ = "0.1.0"
