"""The master's metrics: children's reports in, the master's own events, ``/metrics`` out.

Everything here runs in the master's loop: the report socket and the HTTP
sockets are in its ``select`` set, and a scrape is answered in the pass
that reads it. A scrape never reads Redis (the loop must not wait on it):
the queue sizes are read by the master's Redis thread (metrics/queues.py)
and a scrape shows the latest reading. The children's memory is read from
/proc at scrape time, cached, so a scraper that polls every second costs
little.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Protocol, TypeVar

import redis
from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app

from jobmaster.config import Config
from jobmaster.errors import JobmasterError
from jobmaster.metrics.collector import (
    ChildView,
    MasterCounters,
    Scrape,
    ScrapeCollector,
)
from jobmaster.metrics.queues import QueueWatch
from jobmaster.metrics.series import decode
from jobmaster.metrics.server import PATH, MetricsServer
from jobmaster.metrics.totals import JobTotals
from jobmaster.procmem import MB, measure_mb
from jobmaster.recovery import RecoveryReport

log = logging.getLogger("jobmaster.metrics.hub")


class _Child(Protocol):
    @property
    def index(self) -> int: ...
    @property
    def pid(self) -> int: ...
    @property
    def state(self) -> str: ...


class Children(Protocol):
    """What the hub reads of the master's child table (supervisor/children.py's
    ``ChildTable``), declared here: the supervisor imports metrics, not back."""

    @property
    def by_pid(self) -> Mapping[int, _Child]: ...
    def __iter__(self) -> Iterator[_Child]: ...


MAX_REPORTS_PER_PASS = 256  # reports read per loop pass: children cannot hold the loop
MAX_REPORTS_DRAINED = 100_000  # a bound, far above what the socket's buffer holds

T = TypeVar("T")


class Cached:
    """A value read at most once per ``ttl`` seconds; after a failure (None),
    not read again for ``retry_after`` seconds."""

    def __init__(self, ttl: float, retry_after: float) -> None:
        self.ttl = ttl
        self.retry_after = retry_after
        self._value: object | None = None
        self._until = 0.0

    def get(self, read: Callable[[], T | None], now: float) -> T | None:
        if now >= self._until:
            self._value = read()
            self._until = now + (self.ttl if self._value is not None else self.retry_after)
        return self._value  # type: ignore[return-value]  # what read() returned


class MetricsHub:
    def __init__(
        self,
        config: Config,
        children: Children,
        wanted: Callable[[], int],
        client: redis.Redis,
    ) -> None:
        self.config = config
        self.children = children
        self.wanted = wanted
        # Refreshed by the master's Redis thread (duties.py), read by scrapes.
        self.queue_watch = QueueWatch(client, config.namespace, config.queue_names)
        # Made before any fork: every child inherits the sending end. Both
        # ends are non-blocking (the flag is shared by every copy): a child's
        # send never waits, nor does the master's read.
        self.receiver, self.sender = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.receiver.setblocking(False)
        self.sender.setblocking(False)
        # A datagram cannot exceed the sender's buffer: that size reads any whole.
        self._buffer = bytearray(self.sender.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
        self.totals = JobTotals()
        self.counters = MasterCounters()
        self._memory = Cached(config.memory_check_interval, config.memory_check_interval)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(ScrapeCollector(self.scrape))
        ProcessCollector(namespace="jobmaster", registry=registry)  # the master's own
        self.server = MetricsServer(
            config.metrics_host, config.metrics_port, make_wsgi_app(registry)
        )

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> None:
        """Listen, before any fork; a port in use is an error at start, not later."""
        try:
            self.server.listen()
        except OSError as error:
            where = f"{self.config.metrics_host}:{self.config.metrics_port}"
            raise JobmasterError(f"metrics_port: cannot listen on {where}: {error}") from error
        host, port = self.server.address
        shown = f"[{host}]" if ":" in host else host
        log.info("serving metrics at http://%s:%d%s", shown, port, PATH)

    def close(self) -> None:
        self.server.close()
        self.receiver.close()
        self.sender.close()

    def child_fds(self) -> list[int]:
        """What a new child must close: only the master reads reports and serves HTTP."""
        return [self.receiver.fileno(), *self.server.fds()]

    # -- the loop ----------------------------------------------------------------
    def read_fds(self) -> list[int]:
        return [self.receiver.fileno(), *self.server.read_fds()]

    def write_fds(self) -> list[int]:
        return self.server.write_fds()

    def on_ready(self, readable: Collection[int], writable: Collection[int]) -> None:
        """After each select: take children's reports, then serve (reports first,
        so a scrape in the same pass sees them)."""
        if self.receiver.fileno() in readable:
            self.take_reports()
        self.server.handle(readable, writable)

    def take_reports(self, gone: int | None = None, limit: int = MAX_REPORTS_PER_PASS) -> None:
        """Read up to ``limit`` waiting reports; only from our children (and ``gone``,
        just reaped): a process a job forked inherits the socket, and must not count."""
        for _ in range(limit):
            try:
                size = self.receiver.recv_into(self._buffer)
            except (BlockingIOError, InterruptedError):
                return
            report = decode(bytes(self._buffer[:size]))
            if report is None:
                log.debug("metrics: ignored a malformed report (%d bytes)", size)
            elif report.pid in self.children.by_pid or report.pid == gone:
                self.totals.update(report)

    # -- events from the master ----------------------------------------------------
    def child_gone(self, pid: int, restart: str | None) -> None:
        """A child was reaped: its last report is in the socket or already read.
        Everything waiting is read (the socket's buffer bounds it), so that
        report is not left to a later pass, when the pid is no longer ours."""
        self.take_reports(gone=pid, limit=MAX_REPORTS_DRAINED)
        self.totals.retire(pid)
        if restart is not None:
            self.counters.restarts[restart] = self.counters.restarts.get(restart, 0) + 1

    def recovered(self, report: RecoveryReport) -> None:
        self.counters.requeued += len(report.requeued)
        self.counters.poison_pills += len(report.buried)

    # -- a scrape ------------------------------------------------------------------
    def scrape(self) -> Scrape:
        now = time.monotonic()
        children = [ChildView(c.index, c.pid, c.state) for c in self.children]
        return Scrape(
            jobs=self.totals.series(),
            busy=self.totals.busy,
            threads=self.totals.threads,
            children=children,
            wanted=self.wanted(),
            memory=self._memory.get(lambda: self._measure(children), now) or {},
            counters=self.counters,
            queues=self.queue_watch.scraped(now),
        )

    def _measure(self, children: list[ChildView]) -> dict[int, float]:
        metric = self.config.memory_metric
        sizes = {c.pid: measure_mb(c.pid, metric) for c in children}
        return {pid: size * MB for pid, size in sizes.items() if size is not None}
