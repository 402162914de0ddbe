"""What ``/metrics`` shows: metric families built from one scrape's numbers.

Pure: ``families(scrape)`` turns plain values into prometheus_client metric
families, which the library then writes in the text format (or OpenMetrics,
if the scraper asks). Every name starts with ``jobmaster_``. Label values
are bounded: job names are registered ones, queues configured ones or those
in Redis, children their index and pid, restart reasons a fixed list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from jobmaster.api.stats import QueueStats
from jobmaster.metrics.series import Key, Series

# Why a child was replaced: died (crash), left by itself with exit 0 (exit),
# recycled over its memory limit or by the container guard (memory), after
# max_jobs_per_child (max_jobs), stuck in a job past its timeout (timeout),
# rolling restart (hup). A stop or a TTOU is no restart and is not counted.
RESTART_REASONS = ("crash", "exit", "memory", "max_jobs", "timeout", "hup")
# The label values of jobmaster_children{state=...}: part of /metrics' contract,
# so spelled here rather than imported from the supervisor (which imports this
# package). tests/unit/test_metrics.py checks they are exactly the states of
# supervisor/children.py, so a new state cannot go unreported.
CHILD_STATES = ("starting", "running", "quiet", "stopping", "retiring", "recycling")


@dataclass
class MasterCounters:
    """Events the master itself sees, counted since it started."""

    restarts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RESTART_REASONS, 0))
    requeued: int = 0  # jobs put back on their queues from a gone child's in-progress list
    poison_pills: int = 0  # jobs the master buried instead (max_crashes reached)


@dataclass(frozen=True)
class ChildView:
    index: int
    pid: int
    state: str


class QueueSnapshot(Protocol):
    """What the scrape reads of the queues (metrics/queues.py's ``QueueReading``)."""

    @property
    def queues(self) -> list[QueueStats]: ...
    @property
    def queues_unshown(self) -> int: ...  # queue names left out of the labels
    @property
    def scheduled_size(self) -> int: ...
    @property
    def retry_size(self) -> int: ...
    @property
    def dead_size(self) -> int: ...


@dataclass
class Scrape:
    """Everything one scrape shows, gathered by the hub."""

    jobs: dict[Key, Series]
    busy: int
    threads: int
    children: Sequence[ChildView]
    wanted: int
    memory: dict[int, float]  # pid -> bytes
    counters: MasterCounters
    queues: QueueSnapshot | None  # None: Redis could not be read


def families(scrape: Scrape) -> list[Metric]:
    return [*_job_families(scrape.jobs), *_child_families(scrape), *_queue_families(scrape)]


def _job_families(jobs: dict[Key, Series]) -> list[Metric]:
    labels = ["job", "queue"]
    processed = CounterMetricFamily(
        "jobmaster_jobs_processed",
        "Jobs run by this master's children, by outcome recorded (failed ones included).",
        labels=labels,
    )
    failed = CounterMetricFamily(
        "jobmaster_jobs_failed",
        "Jobs that raised (retried, dead or dropped) in this master's children.",
        labels=labels,
    )
    duration = HistogramMetricFamily(
        "jobmaster_job_duration_seconds", "How long each job ran, in seconds.", labels=labels
    )
    expired = CounterMetricFamily(
        "jobmaster_jobs_expired",
        "Jobs not run because they were fetched after their expires_in.",
        labels=labels,
    )
    for key, series in sorted(jobs.items()):
        processed.add_metric(list(key), series.processed)
        failed.add_metric(list(key), series.failed)
        duration.add_metric(list(key), series.cumulative(), series.duration_sum)
        expired.add_metric(list(key), series.expired)
    return [processed, failed, duration, expired]


def _child_families(scrape: Scrape) -> list[Metric]:
    children = GaugeMetricFamily(
        "jobmaster_children", "Children of this master, by state.", labels=["state"]
    )
    for state in CHILD_STATES:
        children.add_metric([state], sum(c.state == state for c in scrape.children))
    memory = GaugeMetricFamily(
        "jobmaster_child_memory_bytes",
        "Memory of each child, by the memory_metric setting (uss by default).",
        labels=["child", "pid"],
    )
    for child in sorted(scrape.children, key=lambda c: (c.index, c.pid)):
        if child.pid in scrape.memory:
            memory.add_metric([str(child.index), str(child.pid)], scrape.memory[child.pid])
    restarts = CounterMetricFamily(
        "jobmaster_child_restarts",
        "Children replaced, by reason: crash, exit, memory, max_jobs, timeout, hup.",
        labels=["reason"],
    )
    for reason, count in sorted(scrape.counters.restarts.items()):
        restarts.add_metric([reason], count)
    return [
        children,
        _gauge("jobmaster_children_wanted", "Children this master keeps running.", scrape.wanted),
        memory,
        restarts,
        _counter(
            "jobmaster_jobs_requeued",
            "Jobs put back on their queues from the in-progress list of a child that died.",
            scrape.counters.requeued,
        ),
        _counter(
            "jobmaster_poison_pills",
            "Jobs the master sent to the dead set after they killed max_crashes children.",
            scrape.counters.poison_pills,
        ),
        _gauge("jobmaster_busy_threads", "Job threads running a job now.", scrape.busy),
        _gauge("jobmaster_threads", "Job threads of the children that reported.", scrape.threads),
    ]


def _queue_families(scrape: Scrape) -> list[Metric]:
    stats = scrape.queues
    up = _gauge("jobmaster_redis_up", "1 if this scrape could read Redis.", int(stats is not None))
    if stats is None:
        return [up]
    per_queue: list[tuple[str, str, Callable[[QueueStats], float]]] = [
        ("jobmaster_queue_size", "Jobs waiting in each queue.", _size),
        ("jobmaster_queue_latency_seconds", "Age of the oldest job in each queue.", _latency),
        ("jobmaster_queue_paused", "1 if the queue is paused.", _paused),
    ]
    result: list[Metric] = [up]
    for name, documentation, value in per_queue:
        family = GaugeMetricFamily(name, documentation, labels=["queue"])
        for queue in sorted(stats.queues, key=lambda q: q.name):
            family.add_metric([queue.name], value(queue))
        result.append(family)
    result.append(
        _gauge(
            "jobmaster_queues_unshown",
            "Queues left out of the per-queue metrics: at most 100 are labelled.",
            stats.queues_unshown,
        )
    )
    sets = GaugeMetricFamily(
        "jobmaster_set_size", "Jobs in the scheduled, retry and dead sets.", labels=["set"]
    )
    for name, size in (
        ("scheduled", stats.scheduled_size),
        ("retry", stats.retry_size),
        ("dead", stats.dead_size),
    ):
        sets.add_metric([name], size)
    return [*result, sets]


def _size(queue: QueueStats) -> float:
    return queue.size


def _latency(queue: QueueStats) -> float:
    return queue.latency


def _paused(queue: QueueStats) -> float:
    return int(queue.paused)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


class ScrapeCollector(Collector):
    """Adapts a function that gathers a ``Scrape`` to prometheus_client's registry."""

    def __init__(self, gather: Callable[[], Scrape]) -> None:
        self.gather = gather

    def collect(self) -> Iterable[Metric]:
        return families(self.gather())
