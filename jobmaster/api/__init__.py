"""The operator's Python API: queues, the scheduled/retry/dead sets, processes,
stats, batches.

What ``jobmaster stats``, ``ps``, ``ctl``, ``dead|retries|scheduled`` and
``queue`` (and the web dashboard) are built on::

    from jobmaster.api import DeadSet, ProcessSet, Queue, Stats

    Queue("default").size(), Queue("default").latency()
    DeadSet().retry_where(error="TimeoutError")
    ProcessSet().quiet_all()

Each object takes a ``redis.Redis`` (plus ``namespace=``), a ``jobmaster.Client``,
or nothing: the producer's default client (``jobmaster.configure``).
"""

from __future__ import annotations

from jobmaster.api.batches import BatchInfo, BatchSet
from jobmaster.api.cancels import Cancellation, Canceller
from jobmaster.api.history import Minute, throughput
from jobmaster.api.info import redis_info
from jobmaster.api.processes import Process, ProcessSet, RunningJob
from jobmaster.api.queues import Queue
from jobmaster.api.records import JobRecord, SortedEntry
from jobmaster.api.sorted_sets import (
    DeadSet,
    JobSet,
    KillableSet,
    NotRunnable,
    RetrySet,
    ScheduledSet,
)
from jobmaster.api.stats import DayStats, QueueStats, Stats

__all__ = [
    "BatchInfo",
    "BatchSet",
    "Cancellation",
    "Canceller",
    "DayStats",
    "DeadSet",
    "JobRecord",
    "JobSet",
    "KillableSet",
    "Minute",
    "NotRunnable",
    "Process",
    "ProcessSet",
    "Queue",
    "QueueStats",
    "RetrySet",
    "RunningJob",
    "ScheduledSet",
    "SortedEntry",
    "Stats",
    "redis_info",
    "throughput",
]
