"""The app a worker imports in tests/contrib/test_otel.py: the middleware set
up in the app module, and OpenTelemetry's SDK set up in each child after fork,
as docs/integrations.md says, with an exporter that appends each ended span
as a JSON line to ``OTEL_TEST_SPANS`` (how a child's spans reach the test)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import jobmaster
import jobmaster.contrib.otel

jobmaster.contrib.otel.setup()


def describe(span: ReadableSpan) -> dict[str, Any]:
    """What the tests read of a span: ids as hex, as traceparent spells them."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "links": [
            [f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}"] for link in span.links
        ],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [event.name for event in span.events],
        "pid": os.getpid(),
    }


class FileExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        text = "".join(json.dumps(describe(span)) + "\n" for span in spans)
        with open(self.path, "a") as file:  # one write per batch: lines never interleave
            file.write(text)
        return SpanExportResult.SUCCESS


@jobmaster.on_child_start
def start_tracing() -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["OTEL_TEST_SPANS"])))
    trace.set_tracer_provider(provider)


@jobmaster.job
def resize(image: int) -> int:
    with trace.get_tracer("otel_app").start_as_current_span("resize pixels"):
        return image * 2


@jobmaster.job(retry=1, backoff=0)
def flaky(image: int) -> None:
    raise OSError(f"disk full while writing {image}")


@jobmaster.job
def fan_out(image: int) -> None:
    resize.enqueue(image)
