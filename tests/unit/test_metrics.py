"""The metrics' parts without a master process: counting, reports, aggregation, rendering.

Reports travel over a real ``socketpair`` (no fork: this process plays the
child); rendering goes through prometheus_client and back through its parser.
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobmaster.api.stats import QueueStats
from jobmaster.config import Config
from jobmaster.metrics.collector import ChildView, MasterCounters, Scrape, ScrapeCollector
from jobmaster.metrics.hub import MAX_REPORTS_PER_PASS, Cached, MetricsHub
from jobmaster.metrics.jobs import UNREGISTERED, JobMetrics, Reporter
from jobmaster.metrics.queues import (
    IDLE_INTERVAL,
    QUEUE_STATS_TTL,
    REDIS_RETRY_AFTER,
    QueueWatch,
)
from jobmaster.metrics.series import BUCKETS, Report, Series, decode, encode
from jobmaster.metrics.totals import JobTotals
from jobmaster.recovery import RecoveryReport
from jobmaster.settings import host, port
from jobmaster.supervisor.children import RUNNING, STOPPING, Child, ChildTable
from jobmaster.worker.outcome import Outcome
from tests import jobs  # noqa: F401 - registers tests.record

pytestmark = pytest.mark.timeout(30)
NOBODY_LISTENS = "redis://127.0.0.1:1/0"  # never the shared Redis, even by mistake


def series(processed: int, failed: int = 0, seconds: float | None = None) -> Series:
    result = Series()
    for n in range(processed):
        result.observe(n < failed, seconds)
    return result


def expired_too(counted: Series, expired: int) -> Series:
    counted.expired = expired
    return counted


# -- one series: buckets ---------------------------------------------------------
def test_a_duration_lands_in_the_first_bucket_that_holds_it() -> None:
    s = Series()
    for seconds in (0.005, 0.006, 3599.0, 5000.0, -1.0):  # -1: a wall clock stepped back
        s.observe(False, seconds)
    assert s.buckets[0] == 2  # 0.005 (le is inclusive) and the negative one, as 0
    assert s.buckets[1] == 1
    assert s.buckets[len(BUCKETS) - 1] == 1  # le=3600
    assert s.buckets[-1] == 1  # over the last bound: only in +Inf
    cumulative = s.cumulative()
    assert cumulative[0] == ("0.005", 2.0)
    assert cumulative[-1] == ("+Inf", 5.0)
    assert [count for _, count in cumulative] == sorted(count for _, count in cumulative)
    assert s.duration_sum == pytest.approx(0.005 + 0.006 + 3599.0 + 5000.0)


def test_a_run_without_a_known_duration_counts_but_is_not_in_the_histogram() -> None:
    s = series(1, 1, None)
    assert (s.processed, s.failed, sum(s.buckets)) == (1, 1, 0)


# -- the report on the wire --------------------------------------------------------
def test_a_report_survives_the_wire() -> None:
    report = Report(4107, busy=2, threads=5, jobs={("a.job", "default"): series(3, 1, 0.2)})
    back = decode(encode(report))
    assert back == report


def test_expired_jobs_survive_the_wire_and_a_report_without_them_still_reads() -> None:
    counted = series(3, 1, 0.2)
    counted.expired = 4
    report = Report(4107, busy=0, threads=5, jobs={("a.job", "default"): counted})
    assert decode(encode(report)) == report
    older = b'{"v":1,"pid":1,"busy":0,"threads":1,"jobs":[["j","q",2,1,0.5,%s]]}' % (
        str([0] * (len(BUCKETS) + 1)).encode()
    )
    read = decode(older)
    assert read is not None and read.jobs[("j", "q")].expired == 0


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[]",
        b'{"v": 2, "pid": 1, "busy": 0, "threads": 0, "jobs": []}',
        b'{"v": 1, "pid": -1, "busy": 0, "threads": 0, "jobs": []}',
        b'{"v": 1, "pid": true, "busy": 0, "threads": 0, "jobs": []}',
        b'{"v": 1, "pid": 1, "busy": 0, "threads": 0, "jobs": [["j", "q", 1, 0, 0.1, [1]]]}',
        b'{"v": 1, "pid": 1, "busy": 0, "threads": 0, "jobs": [[1, "q", 1, 0, 0.1, []]]}',
        b'{"v": 1, "pid": 1, "busy": 0, "threads": 0, "jobs": [["j", "q", 1, 0, NaN, []]]}',
        b'{"v": 1, "pid": 1, "busy": 0, "threads": 0}',
    ],
)
def test_anything_else_is_no_report(data: bytes) -> None:
    assert decode(data) is None


# -- the child: counting outcomes --------------------------------------------------
def outcome(kind: Any, job: str, failed: bool = False, seconds: float | None = 0.5) -> Outcome:
    started = 1000.0 if seconds is not None else 0.0
    ended = started + (seconds or 0.0)
    return Outcome(kind, "jid", job, failed=failed, started_at=started, ended_at=ended)


def test_outcomes_are_counted_by_registered_job_and_queue() -> None:
    metrics = JobMetrics()
    metrics.observe_outcome(outcome("done", "tests.record"), "default")
    metrics.observe_outcome(outcome("retry", "tests.record", failed=True), "default")
    metrics.observe_outcome(outcome("dead", "tests.record", failed=True), "low")
    metrics.observe_outcome(outcome("deferred", "tests.record"), "default")  # did not run
    metrics.observe_outcome(outcome("dead", "os.system", failed=True), "default")
    metrics.observe_outcome(outcome("dead", "tests.record", True, seconds=None), "low")
    counted = metrics.snapshot()
    assert set(counted) == {
        ("tests.record", "default"),
        ("tests.record", "low"),
        (UNREGISTERED, "default"),  # names from Redis are not label values
    }
    default = counted[("tests.record", "default")]
    assert (default.processed, default.failed, sum(default.buckets)) == (2, 1, 2)
    assert default.duration_sum == pytest.approx(1.0)
    low = counted[("tests.record", "low")]
    assert (low.processed, low.failed, sum(low.buckets)) == (2, 2, 1)
    assert metrics.version == 5


def test_an_expired_job_is_counted_apart_not_as_a_run() -> None:
    metrics = JobMetrics()
    metrics.observe_outcome(outcome("expired", "tests.record", seconds=None), "default")
    metrics.observe_outcome(outcome("done", "tests.record"), "default")
    counted = metrics.snapshot()[("tests.record", "default")]
    assert (counted.processed, counted.failed, counted.expired) == (1, 0, 1)
    total = counted.copy()
    total.add(counted)
    assert total.expired == 2


# -- master side: totals -------------------------------------------------------------
def test_totals_sum_the_children_and_keep_a_gone_child_s_counts() -> None:
    totals = JobTotals()
    key = ("tests.record", "default")
    totals.update(Report(1, busy=1, threads=5, jobs={key: series(2)}))
    totals.update(Report(2, busy=2, threads=5, jobs={key: series(3, 1)}))
    totals.update(Report(1, busy=0, threads=5, jobs={key: series(4)}))  # cumulative: replaces
    assert totals.series()[key].processed == 7
    assert (totals.busy, totals.threads) == (2, 10)
    totals.retire(1)
    totals.update(Report(3, busy=0, threads=5, jobs={key: series(1)}))  # its replacement
    assert totals.series()[key].processed == 8  # never backwards
    assert totals.series()[key].failed == 1
    assert (totals.busy, totals.threads) == (2, 10)
    totals.retire(1)  # twice: nothing more
    totals.retire(99)  # never reported
    assert totals.series()[key].processed == 8


# -- from a child's reporter to the master's hub, over the real socket ------------------
@pytest.fixture
def hub(free_port: int) -> Any:
    config = Config(metrics_port=free_port, redis_url=NOBODY_LISTENS)
    children = ChildTable()
    built = MetricsHub(config, children, lambda: 1, redis.Redis.from_url(NOBODY_LISTENS))
    # This process plays the child that reports.
    children.add(Child(1, os.getpid(), "h:me:n", 0.0, state=RUNNING))
    try:
        yield built
    finally:
        built.close()


def test_reports_reach_the_hub_at_most_once_a_second_and_at_exit(hub: MetricsHub) -> None:
    metrics = JobMetrics()
    reporter = Reporter(hub.sender, metrics, lambda: 1, threads=3)
    key = ("tests.record", "default")
    metrics.observe(*key, failed=False, seconds=0.1)
    reporter.tick(now=100.0)
    hub.take_reports()
    assert hub.totals.series()[key].processed == 1
    assert (hub.totals.busy, hub.totals.threads) == (1, 3)
    metrics.observe(*key, failed=True, seconds=0.1)
    reporter.tick(now=100.5)  # within the second: not yet
    hub.take_reports()
    assert hub.totals.series()[key].processed == 1
    reporter.flush()  # stopping: the final report goes now
    hub.take_reports()
    assert (hub.totals.series()[key].processed, hub.totals.series()[key].failed) == (2, 1)
    assert hub.totals.busy == 0
    hub.child_gone(os.getpid(), "crash")
    assert hub.totals.series()[key].processed == 2  # kept
    assert hub.counters.restarts["crash"] == 1


def test_a_full_socket_drops_reports_and_the_next_one_carries_everything(
    hub: MetricsHub,
) -> None:
    metrics = JobMetrics()
    reporter = Reporter(hub.sender, metrics, lambda: 0, threads=3)
    key = ("tests.record", "default")
    sent = 5000  # far more than the socket's buffer holds unread
    for second in range(sent):
        metrics.observe(*key, failed=False, seconds=0.1)
        reporter.tick(now=float(second))  # never raises, never blocks
    for _ in range(sent // MAX_REPORTS_PER_PASS + 1):
        hub.take_reports()
    assert hub.totals.series()[key].processed < sent  # the last ones were dropped
    reporter.tick(now=float(sent))
    hub.take_reports()
    assert hub.totals.series()[key].processed == sent


def test_reports_from_processes_that_are_not_our_children_are_ignored(hub: MetricsHub) -> None:
    key = ("tests.record", "default")
    stranger = Report(os.getpid() + 1, jobs={key: series(5)})  # a process a job forked
    hub.sender.send(encode(stranger))
    hub.sender.send(b"garbage")
    hub.take_reports()
    assert hub.totals.series() == {}
    hub.sender.send(encode(Report(424242, jobs={key: series(1)})))  # just reaped: still ours
    hub.child_gone(424242, None)
    assert hub.totals.series()[key].processed == 1
    assert sum(hub.counters.restarts.values()) == 0  # None: a stop, not a restart


def test_the_hub_counts_requeued_jobs_and_poison_pills(hub: MetricsHub) -> None:
    hub.recovered(RecoveryReport(requeued=["a", "b"], buried=["c"]))
    hub.recovered(RecoveryReport())
    assert (hub.counters.requeued, hub.counters.poison_pills) == (2, 1)


def test_a_scrape_without_redis_says_so_and_shows_the_rest(hub: MetricsHub) -> None:
    scrape = hub.scrape()
    assert scrape.queues is None
    assert scrape.wanted == 1
    assert scrape.children == [ChildView(1, os.getpid(), RUNNING)]
    assert scrape.memory[os.getpid()] > 0  # this process, measured as a child would be


def test_a_scrape_never_reads_redis_it_shows_the_redis_thread_s_last_reading(
    hub: MetricsHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scrape runs in the master's loop, which must not wait on Redis."""

    def no_call(*args: Any) -> None:
        raise AssertionError("a scrape read Redis")

    monkeypatch.setattr(QueueWatch, "read", no_call)
    assert hub.scrape().queues is None  # nothing read yet
    reading = FakeStats()
    hub.queue_watch.latest = reading  # what the Redis thread's refresh leaves
    assert hub.scrape().queues is reading


def test_the_queues_are_read_while_scraped_and_seldom_otherwise() -> None:
    watch = QueueWatch(redis.Redis.from_url(NOBODY_LISTENS), "jobmaster")
    assert watch.due(0.0)  # never read
    watch.refresh(100.0)  # nobody listens: a failed read
    assert watch.latest is None
    assert not watch.due(100.0 + REDIS_RETRY_AFTER - 0.1)
    assert watch.due(100.0 + REDIS_RETRY_AFTER)
    watch._failing, watch._read_at = False, 200.0  # as after a good read at 200
    assert not watch.due(200.0 + QUEUE_STATS_TTL)  # nobody scraped: idle
    assert watch.due(200.0 + IDLE_INTERVAL)
    watch.scraped(201.0)  # a scraper comes: fresh numbers for its next visit
    assert watch.due(200.0 + QUEUE_STATS_TTL)
    assert not watch.due(200.0 + QUEUE_STATS_TTL - 0.1)


# -- rendering ---------------------------------------------------------------------------
def render(scrape: Scrape) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ScrapeCollector(lambda: scrape))
    samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


class FakeStats:
    def __init__(self) -> None:
        self.queues = [QueueStats("default", 12, 95.5, False), QueueStats("low", 0, 0.0, True)]
        self.scheduled_size, self.retry_size, self.dead_size = 4, 1, 2
        self.queues_unshown = 7


def test_rendering_names_every_metric_with_its_labels() -> None:
    counters = MasterCounters()
    counters.restarts["crash"] = 2
    counters.requeued, counters.poison_pills = 3, 1
    scrape = Scrape(
        jobs={
            ("a.job", "default"): expired_too(series(3, 1, 0.2), 2),
            ("b.job", "low"): series(1, 0, 20.0),
        },
        busy=2,
        threads=10,
        children=[ChildView(1, 100, RUNNING), ChildView(1, 99, STOPPING)],
        wanted=2,
        memory={100: 50e6, 99: 80e6},
        counters=counters,
        queues=FakeStats(),
    )
    samples = render(scrape)
    a = (("job", "a.job"), ("queue", "default"))
    a_le = lambda le: (("job", "a.job"), ("le", le), ("queue", "default"))  # noqa: E731
    assert samples[("jobmaster_jobs_processed_total", a)] == 3
    assert samples[("jobmaster_jobs_failed_total", a)] == 1
    assert samples[("jobmaster_jobs_expired_total", a)] == 2
    assert samples[("jobmaster_job_duration_seconds_count", a)] == 3
    assert samples[("jobmaster_job_duration_seconds_sum", a)] == pytest.approx(0.6)
    assert samples[("jobmaster_job_duration_seconds_bucket", a_le("0.1"))] == 0
    assert samples[("jobmaster_job_duration_seconds_bucket", a_le("0.25"))] == 3
    b_inf = (("job", "b.job"), ("le", "+Inf"), ("queue", "low"))
    assert samples[("jobmaster_job_duration_seconds_bucket", b_inf)] == 1
    assert samples[("jobmaster_children", (("state", "running"),))] == 1
    assert samples[("jobmaster_children", (("state", "stopping"),))] == 1
    assert samples[("jobmaster_children", (("state", "starting"),))] == 0
    assert samples[("jobmaster_children_wanted", ())] == 2
    assert samples[("jobmaster_child_memory_bytes", (("child", "1"), ("pid", "99")))] == 80e6
    assert samples[("jobmaster_child_restarts_total", (("reason", "crash"),))] == 2
    assert samples[("jobmaster_child_restarts_total", (("reason", "hup"),))] == 0
    assert samples[("jobmaster_jobs_requeued_total", ())] == 3
    assert samples[("jobmaster_poison_pills_total", ())] == 1
    assert samples[("jobmaster_busy_threads", ())] == 2
    assert samples[("jobmaster_queue_size", (("queue", "default"),))] == 12
    assert samples[("jobmaster_queue_latency_seconds", (("queue", "default"),))] == 95.5
    assert samples[("jobmaster_queue_paused", (("queue", "low"),))] == 1
    assert samples[("jobmaster_set_size", (("set", "dead"),))] == 2
    assert samples[("jobmaster_queues_unshown", ())] == 7
    assert samples[("jobmaster_redis_up", ())] == 1
    assert all(name.startswith("jobmaster_") for name, _ in samples)


def test_rendering_without_redis_leaves_the_queues_out() -> None:
    scrape = Scrape({}, 0, 0, [], 1, {}, MasterCounters(), queues=None)
    samples = render(scrape)
    assert samples[("jobmaster_redis_up", ())] == 0
    assert not any(name.startswith("jobmaster_queue_") for name, _ in samples)


# -- the cache in front of Redis and /proc -------------------------------------------------
def test_cached_reads_once_per_ttl_and_waits_longer_after_a_failure() -> None:
    cache = Cached(ttl=2.0, retry_after=5.0)
    answers: list[int | None] = [1, None, 3]
    reads: list[float] = []

    def read(now: float) -> Any:
        reads.append(now)
        return answers.pop(0)

    assert cache.get(lambda: read(0.0), 0.0) == 1
    assert cache.get(lambda: read(1.0), 1.0) == 1  # cached
    assert cache.get(lambda: read(2.0), 2.0) is None  # read again: it failed
    assert cache.get(lambda: read(6.9), 6.9) is None  # not retried within 5 s
    assert cache.get(lambda: read(7.0), 7.0) == 3
    assert reads == [0.0, 2.0, 7.0]


# -- settings ------------------------------------------------------------------------------
def test_metrics_settings_parse_and_refuse() -> None:
    assert port("9100") == 9100
    assert port(0) == 0
    for bad in (-1, 65536, "http", True, 1.5):
        with pytest.raises(ValueError, match="must be"):
            port(bad)
    assert host(" 0.0.0.0 ") == "0.0.0.0"  # noqa: S104 - a value, not a bind
    assert host("::1") == "::1"
    for bad in ("", "a host", "http://x/", 5):
        with pytest.raises(ValueError, match="must be a host name"):
            host(bad)
    assert Config().metrics_port == 0 and Config().metrics_host == "127.0.0.1"
    assert math.isfinite(BUCKETS[-1])


def test_the_children_gauge_names_every_state_of_the_supervisor() -> None:
    # collector.py spells the states (metrics does not import the supervisor):
    # a state added to supervisor/children.py's ChildState must be added there too.
    from jobmaster.metrics.collector import CHILD_STATES
    from jobmaster.supervisor.children import ChildState

    assert sorted(CHILD_STATES) == sorted(state.value for state in ChildState)
