"""The Sentry and OpenTelemetry middleware around ``async def`` jobs, as the worker
will await them: ``abefore_process``, the job, ``aafter_process``, all in the
job's own asyncio task, many tasks at once on one loop. In process: what is
current inside one job must be that job's, never its neighbour's."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from jobmaster import payload as wire
from jobmaster.keys import Keys
from jobmaster.middleware import JobContext

pytestmark = pytest.mark.timeout(30)


def job_context(name: str, jid_args: list[Any]) -> JobContext:
    payload = wire.build(name, jid_args, {}, queue="default")
    return JobContext(payload, "default", "worker-1", None, Keys(), None)  # type: ignore[arg-type]


@pytest.fixture
def sentry_events() -> Iterator[list[dict[str, Any]]]:
    sentry_sdk = pytest.importorskip("sentry_sdk")
    from sentry_sdk.transport import Transport

    events: list[dict[str, Any]] = []

    class Capture(Transport):
        def capture_envelope(self, envelope: Any) -> None:
            events.extend(item.payload.json for item in envelope.items if item.type == "event")

    # No default integrations: this process is pytest's, its logging is not ours to patch.
    sentry_sdk.init(dsn="http://key@127.0.0.1:9/1", transport=Capture, default_integrations=False)
    try:
        yield events
    finally:
        sentry_sdk.get_client().close()
        sentry_sdk.init(default_integrations=False)  # no DSN: nothing sent from here on


def test_sentry_scopes_of_concurrent_async_jobs_stay_apart(
    sentry_events: list[dict[str, Any]],
) -> None:
    import sentry_sdk

    from jobmaster.contrib.sentry import SentryMiddleware

    middleware = SentryMiddleware(report="failures")

    async def job(number: int) -> None:
        context = job_context("tests.async_job", [number])
        await middleware.abefore_process(context)
        await asyncio.sleep(0.01 * (3 - number))  # the others run meanwhile
        sentry_sdk.capture_message(f"from job {number}")  # the job's own report
        await asyncio.sleep(0)
        await middleware.aafter_process(context, ValueError(f"job {number} failed"))

    async def main() -> None:
        await asyncio.gather(*(job(n) for n in range(3)))

    asyncio.run(main())
    assert len(sentry_events) == 6
    for event in sentry_events:
        tags = event["tags"]
        text = event.get("message") or event.get("logentry", {}).get("message", "")
        if text:  # the job's message carries its own job's tags
            assert text == f"from job {_args_of(tags)}"
        else:
            (value,) = event["exception"]["values"]
            assert value["value"] == f"job {_args_of(tags)} failed"
            assert tags["jobmaster.outcome"] == "retry"
            assert event["contexts"]["jobmaster"]["jid"] == tags["jobmaster.jid"]


_JIDS: dict[str, int] = {}


def _args_of(tags: dict[str, str]) -> int:
    return _JIDS[tags["jobmaster.jid"]]


@pytest.fixture(autouse=True)
def _remember_jids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Which job (its argument) each jid made by ``job_context`` belongs to."""
    _JIDS.clear()
    built = wire.build

    def remembering(name: str, args: Any, kwargs: Any, **options: Any) -> dict[str, Any]:
        payload = built(name, args, kwargs, **options)
        _JIDS[str(payload["jid"])] = args[0]
        return payload

    monkeypatch.setattr(wire, "build", remembering)


def test_otel_spans_of_concurrent_async_jobs_stay_apart() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from jobmaster.contrib.otel import OpenTelemetryMiddleware

    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    middleware = OpenTelemetryMiddleware(tracer_provider=provider)
    seen: dict[int, tuple[int, str]] = {}

    async def job(number: int) -> None:
        context = job_context("tests.async_job", [number])
        await middleware.abefore_process(context)
        await asyncio.sleep(0.01 * (3 - number))
        current = trace.get_current_span().get_span_context()
        seen[number] = (current.span_id, context.jid)
        await middleware.aafter_process(context, None if number else OSError("disk full"))

    async def main() -> None:
        await asyncio.gather(*(job(n) for n in range(3)))

    asyncio.run(main())
    spans = {
        span.attributes["messaging.message.id"]: span for span in exported.get_finished_spans()
    }
    assert len(spans) == 3
    for number, (span_id, jid) in seen.items():
        span = spans[jid]
        assert span.get_span_context().span_id == span_id  # its own span was current
        outcome = span.attributes["jobmaster.outcome"]
        assert outcome == ("done" if number else "retry")
    assert not trace.get_current_span().get_span_context().is_valid  # nothing left current
    provider.shutdown()
