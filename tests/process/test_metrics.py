"""``/metrics`` of a real master, scraped over HTTP and read with prometheus_client's parser."""

from __future__ import annotations

import os
import signal
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

import jobmaster
from jobmaster.client import Client
from tests.helpers import wait_until
from tests.process.conftest import JobmasterProcess

pytestmark = [pytest.mark.process, pytest.mark.timeout(90)]
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class Scraper:
    """Scrapes a master's ``/metrics``; ``get`` reads one sample of the last scrape."""

    def __init__(self, port: int, master: JobmasterProcess) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.master = master
        self.samples: Samples = {}
        self.text = ""

    def scrape(self) -> Samples:
        assert self.master.popen.poll() is None, f"master exited:\n{self.master.log()}"
        with urllib.request.urlopen(self.url, timeout=5) as response:  # noqa: S310 - our URL
            assert response.status == 200
            self.text = response.read().decode()
        self.samples = {}
        for family in text_string_to_metric_families(self.text):
            for sample in family.samples:
                self.samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return self.samples

    def get(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, tuple(sorted(labels.items()))))

    def wait_for(
        self, predicate: Callable[[Scraper], bool], what: str, timeout: float = 20
    ) -> None:
        def check() -> bool:
            try:
                self.scrape()
            except (urllib.error.URLError, ConnectionError):
                return False  # not listening yet
            return predicate(self)

        try:
            wait_until(check, timeout=timeout, interval=0.1, message=what)
        except AssertionError:
            raise AssertionError(f"{what}\n{self.text}\n{self.master.log()[-4000:]}") from None


def child_pids(master: JobmasterProcess) -> list[int]:
    return [p.pid for p in psutil.Process(master.pid).children() if p.status() != "zombie"]


def test_jobs_failures_a_sigkilled_child_and_queue_sizes(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str, free_port: int
) -> None:
    config = write_config(processes=1, metrics_port=free_port, memory_check_interval=1)
    master = run_jobmaster("-c", str(config))
    metrics = Scraper(free_port, master)
    metrics.wait_for(lambda m: m.get("jobmaster_children", state="running") == 1, "child up")

    client = Client(redis_url)
    for n in range(3):
        client.push({"job": "tests.record", "args": [f"ok-{n}"]})
    for n in range(2):
        client.push({"job": "tests.permanent", "args": [f"bad-{n}"]})

    def counted(m: Scraper) -> bool:
        record = {"job": "tests.record", "queue": "default"}
        permanent = {"job": "tests.permanent", "queue": "default"}
        return (
            m.get("jobmaster_jobs_processed_total", **record) == 3
            and m.get("jobmaster_jobs_processed_total", **permanent) == 2
        )

    metrics.wait_for(counted, "3 + 2 jobs counted")
    record = {"job": "tests.record", "queue": "default"}
    assert metrics.get("jobmaster_jobs_failed_total", **record) == 0
    assert metrics.get("jobmaster_jobs_failed_total", job="tests.permanent", queue="default") == 2
    assert metrics.get("jobmaster_job_duration_seconds_count", **record) == 3
    assert metrics.get("jobmaster_job_duration_seconds_bucket", **record, le="+Inf") == 3
    assert metrics.get("jobmaster_child_memory_bytes", child="1", pid=str(child_pids(master)[0]))
    assert metrics.get("jobmaster_child_restarts_total", reason="crash") == 0
    assert metrics.get("jobmaster_redis_up") == 1
    assert all(name.startswith("jobmaster_") for name, _ in metrics.samples)

    # A paused queue keeps what is pushed: its size is read from Redis.
    jobmaster.Queue("waiting", store).pause()
    for n in range(4):
        client.push({"job": "tests.record", "args": [f"held-{n}"], "queue": "waiting"})
    metrics.wait_for(
        lambda m: (
            m.get("jobmaster_queue_size", queue="waiting") == 4
            and m.get("jobmaster_queue_paused", queue="waiting") == 1
        ),
        "4 jobs waiting in the paused queue",
    )
    assert (metrics.get("jobmaster_queue_latency_seconds", queue="waiting") or 0) >= 0

    # A scraper that connects and goes silent holds up neither the master nor other scrapes.
    silent = socket.create_connection(("127.0.0.1", free_port), timeout=5)
    silent.sendall(b"GET /metr")

    # SIGKILL the child in the middle of a job: requeued, replaced, counted as a crash,
    # and the counts it reported before dying are kept.
    (victim,) = child_pids(master)
    client.push({"job": "tests.record", "args": ["victim", 30]})
    wait_until(lambda: store.sismember("test:started", "victim"), timeout=10, message="started")
    os.kill(victim, signal.SIGKILL)
    metrics.wait_for(
        lambda m: (
            m.get("jobmaster_child_restarts_total", reason="crash") == 1
            and m.get("jobmaster_jobs_requeued_total") == 1
            and m.get("jobmaster_children", state="running") == 1
            and m.get("jobmaster_busy_threads") == 1
        ),  # the victim, running again
        "the crash counted, the job requeued and running again",
    )
    assert victim not in child_pids(master)
    assert metrics.get("jobmaster_jobs_processed_total", **record) == 3
    assert metrics.get("jobmaster_poison_pills_total") == 0
    silent.close()


def test_poison_pills_and_a_rolling_restart_keep_every_count(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, redis_url: str, free_port: int
) -> None:
    config = write_config(processes=2, max_crashes=2, metrics_port=free_port)
    master = run_jobmaster("-c", str(config))
    metrics = Scraper(free_port, master)
    metrics.wait_for(lambda m: m.get("jobmaster_children", state="running") == 2, "children up")

    client = Client(redis_url)
    client.push({"job": "tests.kill_self", "args": ["pill"]})  # kills its child, twice
    metrics.wait_for(
        lambda m: (
            m.get("jobmaster_child_restarts_total", reason="crash") == 2
            and m.get("jobmaster_jobs_requeued_total") == 1
            and m.get("jobmaster_poison_pills_total") == 1
            and m.get("jobmaster_children", state="running") == 2
        ),  # both replaced, ready for HUP
        "two crashes, one requeue, then the dead set",
    )

    # HUP right after two jobs end, before their child's next report is due:
    # the final report of each child that stops still brings them in.
    for n in range(2):
        client.push({"job": "tests.record", "args": [f"hup-{n}"]})
    wait_until(lambda: store.scard("test:done") == 2, timeout=10, message="2 jobs done")
    master.signal(signal.SIGHUP)
    metrics.wait_for(
        lambda m: (
            m.get("jobmaster_child_restarts_total", reason="hup") == 2
            and m.get("jobmaster_children", state="running") == 2
            and m.get("jobmaster_children", state="stopping") == 0
        ),
        "rolling restart done",
    )
    assert metrics.get("jobmaster_jobs_processed_total", job="tests.record", queue="default") == 2
    assert metrics.get("jobmaster_child_restarts_total", reason="crash") == 2


def test_a_port_in_use_stops_the_master_before_it_forks(
    run_jobmaster: Run, write_config: Write, free_port: int
) -> None:
    with socket.create_server(("127.0.0.1", free_port)):
        master = run_jobmaster("-c", str(write_config(metrics_port=free_port)))
        assert master.wait(timeout=30) == 1
    assert f"metrics_port: cannot listen on 127.0.0.1:{free_port}" in master.log()
    assert "child 1 started" not in master.log()
