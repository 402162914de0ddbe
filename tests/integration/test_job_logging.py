"""Per-job log lines: one start and one end line per attempt, as JSON a shipper can parse.

The worker runs in this process (threads), with logging set up by the real
``setup_logging`` onto a ``sys.stdout`` the test reads, so what is checked
here is exactly what an operator's log collector would get.
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import jobmaster
from jobmaster import crypto
from jobmaster.client import Client
from jobmaster.config import Config
from jobmaster.keys import Keys
from jobmaster.log import setup_logging
from jobmaster.worker.process import WorkerProcess
from tests import jobs
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(60)
K = Keys()
StartWorker = Callable[[Config], WorkerProcess]
EXECUTOR = "jobmaster.worker.executor"


class Output:
    """What ``setup_logging`` wrote to stdout, read without consuming it."""

    def __init__(self, stream: io.StringIO) -> None:
        self.stream = stream

    def text(self) -> str:
        return self.stream.getvalue()

    def entries(self) -> list[dict[str, Any]]:
        # Every line must be one JSON object: json.loads fails the test otherwise.
        return [json.loads(line) for line in self.text().splitlines()]

    def events(self, jid: str | None) -> list[dict[str, Any]]:
        return [e for e in self.entries() if "event" in e and e.get("jid") == jid]

    def kinds(self, jid: str | None) -> list[str]:
        return [e["event"] for e in self.events(jid)]


@pytest.fixture
def logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Output]]:
    """``logs(level, format, levels)``: logging as ``jobmaster run`` sets it up.

    The root logger's handlers and the levels touched are put back after the
    test (with ``setLevel``, which also clears the loggers' level caches).
    """
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    saved: dict[str, int] = {"": root.level}

    def setup(
        level: str = "info", log_format: str = "json", levels: dict[str, str] | None = None
    ) -> Output:
        for name in levels or {}:
            saved.setdefault(name, logging.getLogger(name).level)
        stream = io.StringIO()
        monkeypatch.setattr(sys, "stdout", stream)
        setup_logging(level, log_format, levels)
        return Output(stream)

    yield setup
    for name, level in saved.items():
        logging.getLogger(name or None).setLevel(level)


def test_each_outcome_has_its_start_and_end_lines(
    logs: Callable[..., Output],
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
) -> None:
    out = logs()
    done = client.push({"job": "tests.record", "args": ["ok", 0.2]})
    dead = client.push({"job": "tests.fails", "args": ["f"]})  # retry=2, backoff=0
    dropped = client.push({"job": "tests.dropped", "args": ["d"]})  # retry=False
    running_worker(make_config())
    wait_until(lambda: "job.dead" in out.kinds(dead), timeout=20, message="fails ends dead")
    wait_until(lambda: len(out.kinds(done)) == 2 and len(out.kinds(dropped)) == 2, timeout=10)

    assert out.kinds(done) == ["job.start", "job.done"]
    assert out.kinds(dead) == ["job.start", "job.retry"] * 2 + ["job.start", "job.dead"]
    assert out.kinds(dropped) == ["job.start", "job.failed"]

    start, end = out.events(done)
    for entry in (start, end):
        assert entry["pid"] == os.getpid()
        assert entry["logger"] == EXECUTOR
        assert entry["level"] == "info"
        assert (entry["jid"], entry["job"], entry["queue"]) == (done, "tests.record", "default")
        assert "child" not in entry  # no fork here: fields that don't apply are left out
        assert "error" not in entry
        assert time.strptime(entry["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
    assert "duration_ms" not in start
    assert 200 <= end["duration_ms"] < 5000  # the job sleeps 0.2 s
    assert end["message"] == f"done in {end['duration_ms']:.1f} ms"

    retry = out.events(dead)[1]
    assert retry["level"] == "warning"
    assert retry["error"] == "ValueError: failing on purpose: f"
    assert 0 <= retry["duration_ms"] < 5000
    buried = out.events(dead)[-1]
    assert buried["level"] == "error"
    assert buried["error"] == "ValueError: failing on purpose: f"
    assert "retries exhausted (2)" in buried["message"]
    failed = out.events(dropped)[-1]
    assert failed["level"] == "warning"
    assert failed["error"] == "ValueError: dropped on failure"


def test_a_payload_that_cannot_run_is_one_dead_line_without_a_start(
    logs: Callable[..., Output],
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    out = logs()
    unknown = client.push({"job": "tests.nobody_registered_this", "args": []})
    running_worker(make_config())
    wait_until(lambda: out.kinds(unknown), timeout=10, message="a line for the unknown job")
    wait_until(lambda: store.zcard(K.dead) == 1, timeout=10)
    [line] = out.events(unknown)
    assert line["event"] == "job.dead"
    assert line["level"] == "error"
    assert line["error"] == "BadPayload: no job registered as 'tests.nobody_registered_this'"
    assert "duration_ms" not in line


def test_log_levels_quiets_the_per_job_lines_but_keeps_failures(
    logs: Callable[..., Output],
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
    store: redis.Redis,
) -> None:
    out = logs("info", "json", {EXECUTOR: "warning"})
    quiet = client.push({"job": "tests.record", "args": ["quiet"]})
    failing = client.push({"job": "tests.dropped", "args": ["loud"]})
    running_worker(make_config())
    wait_until(lambda: store.sismember("test:done", "quiet"), timeout=10, message="job ran")
    wait_until(lambda: out.kinds(failing), timeout=10, message="the failure is logged")
    assert out.kinds(failing) == ["job.failed"]  # its start line is INFO: hidden
    assert out.kinds(quiet) == []
    # Only that logger: the worker's own INFO lines are still there.
    assert any(e["level"] == "info" and e["logger"] != EXECUTOR for e in out.entries())


def test_log_levels_can_also_show_one_logger_under_a_quieter_root(
    logs: Callable[..., Output],
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    client: Client,
) -> None:
    out = logs("warning", "json", {EXECUTOR: "info"})
    jid = client.push({"job": "tests.record", "args": ["shown"]})
    running_worker(make_config())
    wait_until(lambda: out.kinds(jid) == ["job.start", "job.done"], timeout=10)
    assert all(e["level"] != "info" for e in out.entries() if e["logger"] != EXECUTOR)


CARD = "4111-1111-1111-1111"
KEY = "logging-test-key-0123456789abcdef"


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_per_job_lines_never_show_arguments_sealed_or_not(
    log_format: str,
    logs: Callable[..., Output],
    make_config: Callable[..., Config],
    running_worker: StartWorker,
    store: redis.Redis,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(jobmaster.client, "_default", None)  # restored after the test
    jobmaster.configure(redis_url, secret_key=KEY)
    try:
        out = logs("debug", log_format)  # the most a worker ever says
        sealed = jobs.encrypted.enqueue("sealed-marker", card=CARD)
        failing = jobs.encrypted.enqueue("failing-marker", card=CARD, fail=True)
        plain = jobs.record.enqueue("plain-argument-marker")
        running_worker(make_config(secret_key=[KEY]))
        wait_until(lambda: store.zcard(K.dead) == 1, timeout=20, message="retried, then dead")
        wait_until(lambda: store.scard("test:done") == 1, timeout=10)
        wait_until(lambda: store.hlen("test:encrypted") == 1, timeout=10)
    finally:
        crypto.set_keys(None)
    text = out.text()
    for jid in (sealed, failing, plain):
        assert jid and jid in text  # the lines are there...
    for argument in (CARD, "sealed-marker", "failing-marker", "plain-argument-marker"):
        assert argument not in text  # ...but no argument, sealed or plain
