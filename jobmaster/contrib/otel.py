"""OpenTelemetry traces from enqueue to the job (``pip install 'jobmaster[otel]'``).

One middleware, installed where jobs are enqueued and where they run (the
app module the worker imports, and the web app's startup)::

    import jobmaster.contrib.otel

    jobmaster.contrib.otel.setup()

or ``middleware = ["jobmaster.contrib.otel:OpenTelemetryMiddleware"]`` in
the worker's config. It uses the OpenTelemetry API only: the SDK (tracer
provider, exporter) is the application's. In the worker, set it up in each
child, after fork (``@jobmaster.on_child_start``): an exporter's thread
started in the master does not exist in a child (the SDK's
``BatchSpanProcessor`` starts its own again after a fork; other processors
may not).

- At enqueue, a PRODUCER span ``publish <queue>`` and the trace context
  injected into the payload as the wire field ``trace_context``: the text
  map of the configured propagator (W3C by default:
  ``{"traceparent": "00-<trace id>-<span id>-01", "tracestate": "..."}``),
  which a producer in another language can write too.
- Each run (each attempt: a retry is a new run), a CONSUMER span
  ``process <queue>``: a child of the producer's context (the same trace)
  and linked to it, current while the job runs (spans the job makes, and jobs
  it enqueues, are its children). A failure is recorded on it (the
  exception as an event, status ERROR, ``jobmaster.outcome`` = ``retry``,
  ``dead`` or ``failed``); a job held back by middleware ends its span with
  ``jobmaster.outcome = deferred``.
- Attributes, per OpenTelemetry's messaging conventions:
  ``messaging.system = "jobmaster"``, ``messaging.destination.name`` (the
  queue), ``messaging.message.id`` (the jid), ``messaging.operation.type``
  (``send`` / ``process``) and ``messaging.operation.name`` (``publish`` /
  ``process``); and ``jobmaster.job`` (its name), ``jobmaster.attempt``,
  ``jobmaster.batch``. Never the arguments.

What the producer span covers is the payload's preparation, not the push's
round trip: middleware hears of a job before it is pushed, and of nothing after.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Any

from opentelemetry import context, propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from jobmaster import middleware as middlewares
from jobmaster.contrib import _failures
from jobmaster.current import JobInfo
from jobmaster.middleware import JobContext, Middleware

FIELD = "trace_context"  # the payload's field (docs/integrations.md, the wire format)
SYSTEM = "jobmaster"
INSTRUMENTATION = "jobmaster.contrib.otel"
# A payload comes from Redis: anyone's to write (SPEC §8). Only a small map of
# short strings is handed to the propagator.
MAX_ENTRIES = 8
MAX_VALUE = 1024

# The running job's span and the context token that made it current, set by
# before_process and ended by after_process (the same thread, or the same
# asyncio task, for one job).
_running: contextvars.ContextVar[tuple[Span, contextvars.Token[Context]] | None] = (
    contextvars.ContextVar("jobmaster_otel_span", default=None)
)


class OpenTelemetryMiddleware(Middleware):
    """A producer span per enqueue, a consumer span per run (see the module)."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        # None: the global provider, looked up at each span (a child sets it
        # after fork, after this was made in the master).
        self.tracer_provider = tracer_provider

    def _tracer(self) -> trace.Tracer:
        return trace.get_tracer(INSTRUMENTATION, tracer_provider=self.tracer_provider)

    # -- producer -------------------------------------------------------------
    def before_enqueue(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        queue = str(payload.get("queue", "default"))
        attributes = {
            **_attributes(queue, payload, "send", "publish"),
            "jobmaster.job": str(payload.get("job", "")),
        }
        with self._tracer().start_as_current_span(
            f"publish {queue}", kind=SpanKind.PRODUCER, attributes=attributes
        ):
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
        if carrier:
            payload[FIELD] = carrier
        return payload

    # -- consumer -------------------------------------------------------------
    def before_process(self, job: JobContext) -> None:
        _end_left_over()  # a job held back by a later middleware
        info = JobInfo.of(job.payload, job.queue)
        parent = propagate.extract(_carrier(job.payload.get(FIELD)))
        producer = trace.get_current_span(parent).get_span_context()
        links = [Link(producer)] if producer.is_valid else []
        attributes: dict[str, Any] = {
            **_attributes(job.queue, job.payload, "process", "process"),
            "jobmaster.job": info.name,
            "jobmaster.attempt": info.attempt,
        }
        if info.batch_id is not None:
            attributes["jobmaster.batch"] = info.batch_id
        span = self._tracer().start_span(
            f"process {job.queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
        )
        token = context.attach(trace.set_span_in_context(span, parent))
        _running.set((span, token))

    def after_process(self, job: JobContext, error: BaseException | None) -> None:
        running = _running.get()
        if running is None:
            return
        span, token = running
        _running.set(None)
        try:
            if error is not None:
                outcome = _failures.outcome_of(job.payload, error)
                span.set_attribute("jobmaster.outcome", outcome)
                if outcome != _failures.CANCELLED:
                    span.record_exception(error)
                    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            else:
                span.set_attribute("jobmaster.outcome", "done")
        finally:
            span.end()
            _detach(token)

    async def abefore_process(self, job: JobContext) -> None:
        self.before_process(job)  # no I/O: in the job's own task, so current in it

    async def aafter_process(self, job: JobContext, error: BaseException | None) -> None:
        self.after_process(job, error)


def _attributes(queue: str, payload: Mapping[str, Any], kind: str, name: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.destination.name": queue,
        "messaging.message.id": str(payload.get("jid", "")),
        "messaging.operation.type": kind,
        "messaging.operation.name": name,
    }


def _carrier(value: object) -> dict[str, str]:
    """The payload's trace context if it is a small map of short strings; else none."""
    if not isinstance(value, dict) or len(value) > MAX_ENTRIES:
        return {}
    return {
        k: v
        for k, v in value.items()
        if isinstance(k, str) and isinstance(v, str) and len(k) + len(v) <= MAX_VALUE
    }


def _end_left_over() -> None:
    running = _running.get()
    if running is None:
        return
    span, token = running
    _running.set(None)
    span.set_attribute("jobmaster.outcome", "deferred")
    span.end()
    _detach(token)


def _detach(token: contextvars.Token[Context]) -> None:
    # A token made in another context is not restored here: the API logs it.
    context.detach(token)


def setup(tracer_provider: trace.TracerProvider | None = None) -> OpenTelemetryMiddleware:
    """Install the middleware for every job (producer and worker side)."""
    installed = OpenTelemetryMiddleware(tracer_provider)
    middlewares.add(installed)
    return installed
