"""OpenTelemetry across a real worker: the producer span made here (the SDK's
in-memory exporter), the consumer spans made in the forked children (their
SDK set up after fork, spans written to a file by tests/contrib/otel_app.py)."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from jobmaster import exitcodes
from jobmaster import middleware as middlewares
from jobmaster.client import Client
from jobmaster.keys import Keys
from tests.helpers import wait_until
from tests.process.conftest import JobmasterProcess, wait_for_worker

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind

from jobmaster.contrib import otel

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]
K = Keys()
APP = ["tests.contrib.otel_app"]
Run = Callable[..., JobmasterProcess]
Write = Callable[..., Path]


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """This process as a producer: the middleware on a provider of the test's own."""
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    saved = middlewares.installed()
    middlewares.add(otel.OpenTelemetryMiddleware(tracer_provider=provider))
    try:
        yield exported
    finally:
        middlewares.clear()
        for middleware in saved:
            middlewares.add(middleware)
        provider.shutdown()


@pytest.fixture
def worker(
    run_jobmaster: Run, write_config: Write, store: redis.Redis, tmp_path: Path
) -> Iterator[tuple[JobmasterProcess, Path]]:
    spans = tmp_path / "spans.jsonl"
    spans.touch()
    master = run_jobmaster(
        "-c", str(write_config(app=APP, processes=2)), env={"OTEL_TEST_SPANS": str(spans)}
    )
    wait_for_worker(store, master)
    yield master, spans
    master.signal(signal.SIGTERM)
    assert master.wait(timeout=30) == exitcodes.OK


def worker_spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def ids(span: ReadableSpan) -> tuple[str, str]:
    context = span.get_span_context()
    assert context is not None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def test_the_consumer_span_continues_the_producers_trace_and_links_to_it(
    exporter: InMemorySpanExporter,
    worker: tuple[JobmasterProcess, Path],
    store: redis.Redis,
    redis_url: str,
) -> None:
    master, path = worker
    jid = Client(redis_url).push({"job": "tests.contrib.otel_app.resize", "args": [21]})
    (producer,) = exporter.get_finished_spans()
    assert producer.name == "publish default"
    assert producer.kind is SpanKind.PRODUCER
    assert dict(producer.attributes or {}) == {
        "messaging.system": "jobmaster",
        "messaging.destination.name": "default",
        "messaging.message.id": jid,
        "messaging.operation.type": "send",
        "messaging.operation.name": "publish",
        "jobmaster.job": "tests.contrib.otel_app.resize",
    }
    trace_id, producer_id = ids(producer)

    wait_until(lambda: len(worker_spans(path)) == 2, timeout=30, message="the child's spans")
    by_name = {span["name"]: span for span in worker_spans(path)}
    consumer, inner = by_name["process default"], by_name["resize pixels"]
    assert consumer["pid"] != master.pid  # made in a forked child
    assert consumer["kind"] == "CONSUMER"
    assert consumer["trace_id"] == trace_id
    assert consumer["parent_id"] == producer_id
    assert consumer["links"] == [[trace_id, producer_id]]
    assert consumer["attributes"] == {
        "messaging.system": "jobmaster",
        "messaging.destination.name": "default",
        "messaging.message.id": jid,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "jobmaster.job": "tests.contrib.otel_app.resize",
        "jobmaster.attempt": 1,
        "jobmaster.outcome": "done",
    }
    assert consumer["status"] == "UNSET"
    # The span is current while the job runs: the job's own span is its child.
    assert (inner["trace_id"], inner["parent_id"]) == (trace_id, consumer["span_id"])


def test_each_attempt_is_a_span_of_the_same_trace_with_its_failure_recorded(
    exporter: InMemorySpanExporter,
    worker: tuple[JobmasterProcess, Path],
    store: redis.Redis,
    redis_url: str,
) -> None:
    _, path = worker
    Client(redis_url).push({"job": "tests.contrib.otel_app.flaky", "args": [3]})
    trace_id, producer_id = ids(exporter.get_finished_spans()[0])
    wait_until(lambda: len(worker_spans(path)) == 2, timeout=30, message="two attempts")
    attempts = sorted(worker_spans(path), key=lambda s: s["attributes"]["jobmaster.attempt"])
    assert [s["attributes"]["jobmaster.outcome"] for s in attempts] == ["retry", "dead"]
    for span in attempts:
        assert (span["trace_id"], span["parent_id"]) == (trace_id, producer_id)
        assert span["links"] == [[trace_id, producer_id]]
        assert span["status"] == "ERROR"
        assert span["events"] == ["exception"]
    # The span ends in after_process, just before the outcome is recorded.
    wait_until(lambda: store.zcard(K.dead) == 1, timeout=10, message="the job dead")


def test_a_job_enqueued_by_a_job_stays_in_the_trace(
    exporter: InMemorySpanExporter,
    worker: tuple[JobmasterProcess, Path],
    redis_url: str,
) -> None:
    _, path = worker
    Client(redis_url).push({"job": "tests.contrib.otel_app.fan_out", "args": [5]})
    trace_id, _ = ids(exporter.get_finished_spans()[0])
    # fan_out's consumer span, the producer span of its enqueue, resize's two spans
    wait_until(lambda: len(worker_spans(path)) == 4, timeout=30, message="four spans")
    spans = worker_spans(path)
    assert {span["trace_id"] for span in spans} == {trace_id}
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_name.setdefault(span["name"], []).append(span)
    (publish,) = by_name["publish default"]
    consumers = {s["attributes"]["jobmaster.job"]: s for s in by_name["process default"]}
    parent, child = (
        consumers["tests.contrib.otel_app.fan_out"],
        consumers["tests.contrib.otel_app.resize"],
    )
    assert publish["parent_id"] == parent["span_id"]
    assert child["parent_id"] == publish["span_id"]
    assert child["links"] == [[trace_id, publish["span_id"]]]


def test_a_forged_trace_context_starts_a_trace_of_its_own(
    worker: tuple[JobmasterProcess, Path], redis_url: str
) -> None:
    _, path = worker
    forged = {"traceparent": "00-not-a-trace", "x" * 2000: "y", "n": 5}
    Client(redis_url).push(
        {"job": "tests.contrib.otel_app.resize", "args": [1], otel.FIELD: forged}
    )
    wait_until(lambda: len(worker_spans(path)) == 2, timeout=30, message="the child's spans")
    consumer = next(s for s in worker_spans(path) if s["name"] == "process default")
    assert consumer["parent_id"] is None and consumer["links"] == []
    assert consumer["attributes"]["jobmaster.outcome"] == "done"


def test_a_chain_stays_one_trace_across_its_steps(
    exporter: InMemorySpanExporter,
    worker: tuple[JobmasterProcess, Path],
    redis_url: str,
) -> None:
    """The chain's next step is pushed by the worker, not by a producer: it
    inherits the step's trace context (payload.CARRIED)."""
    import jobmaster
    from tests.contrib import otel_app

    jobmaster.configure(redis_url)
    jobmaster.chain(otel_app.resize.s(1), otel_app.resize.s(2), otel_app.resize.s(3))
    (publish,) = exporter.get_finished_spans()
    trace_id, publish_id = ids(publish)
    _, path = worker

    def consumers() -> list[dict[str, Any]]:
        return [span for span in worker_spans(path) if span["kind"] == "CONSUMER"]

    wait_until(lambda: len(consumers()) == 3, timeout=30, message="three steps")
    assert {span["trace_id"] for span in worker_spans(path)} == {trace_id}
    assert all(span["links"] == [[trace_id, publish_id]] for span in consumers())
