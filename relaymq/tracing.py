"""OpenTelemetry traces: a PRODUCER span per enqueued job and a CONSUMER span per attempt.

    from relaymq import tracing
    tracing.instrument()        # the global tracer provider; or instrument(tracer_provider=...)

Needs only ``opentelemetry-api`` (``pip install 'relaymq[otel]'``); spans are recorded and
exported by whatever SDK the application configured. Once instrumented, each enqueue opens a
``send <queue>`` span (a child of the span current at the enqueue) and stores its W3C
``traceparent`` with the job; every attempt, in any process, runs its handler inside a
``process <queue>`` span whose parent, and link, is that producer span, so spans the handler
opens join the trace too. Nothing is stored while tracing is off.

Attributes follow OpenTelemetry's messaging conventions: ``messaging.system`` ("relaymq"),
``messaging.destination.name`` (the queue), ``messaging.message.id`` (the job id),
``messaging.operation.type`` ("send" or "process"), ``messaging.operation.name`` ("enqueue"
or "process"), plus ``relaymq.task``, ``relaymq.attempt`` and ``relaymq.outcome``. A handler's
exception is recorded on its attempt's span, whose status is ERROR when the attempt failed
(retried, failed, expired) or its claim was lost.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from importlib.metadata import version

try:
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode, TracerProvider
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as e:  # pragma: no cover - depends on the installed extras
    raise ImportError("relaymq.tracing needs opentelemetry-api: pip install 'relaymq[otel]'") from e

from relaymq.app import App, default_app
from relaymq.job import Job, NewJob
from relaymq.observers import Observer
from relaymq.records.store import Enqueued, Outcome, Settle

__all__ = ["Tracing", "instrument", "uninstrument"]

SYSTEM = "relaymq"
FAILED = frozenset({Outcome.RETRY, Outcome.FAIL, Outcome.EXPIRE})
"""Attempt outcomes whose span status is ERROR."""

_W3C = TraceContextTextMapPropagator()


class _Stamped(list[NewJob]):
    """The jobs of one enqueue, stamped, with their open producer spans (same order)."""

    spans: list[trace.Span]


class Tracing(Observer):
    """The observer that opens relaymq's spans (see the module docstring)."""

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer("relaymq", version("relaymq"), tracer_provider)

    # -- producer ----------------------------------------------------------------------------

    def enqueuing(self, jobs: Sequence[NewJob]) -> Sequence[NewJob]:
        stamped = _Stamped()
        stamped.spans = []
        for job in jobs:
            span = self.tracer.start_span(
                f"send {job.queue}",
                kind=SpanKind.PRODUCER,
                attributes={
                    "messaging.system": SYSTEM,
                    "messaging.destination.name": job.queue,
                    "messaging.message.id": job.id,
                    "messaging.operation.type": "send",
                    "messaging.operation.name": "enqueue",
                    "relaymq.task": job.task,
                },
            )
            carrier: dict[str, str] = {}
            _W3C.inject(carrier, trace.set_span_in_context(span))
            traceparent = carrier.get("traceparent")
            stamped.append(
                dataclasses.replace(job, traceparent=traceparent) if traceparent else job
            )
            stamped.spans.append(span)
        return stamped

    def enqueued(
        self,
        jobs: Sequence[NewJob],
        answers: Sequence[Enqueued] | None,
        error: BaseException | None,
    ) -> None:
        if not isinstance(jobs, _Stamped):
            return
        for k, span in enumerate(jobs.spans):
            if error is not None:
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            elif answers is not None and answers[k].duplicate:
                span.set_attribute("relaymq.duplicate", True)
            span.end()

    # -- consumer ----------------------------------------------------------------------------

    def attempt(self, job: Job) -> contextlib.AbstractContextManager[object]:
        parent = None
        links: list[Link] = []
        if job.traceparent is not None:
            parent = _W3C.extract({"traceparent": job.traceparent})
            producer = trace.get_current_span(parent).get_span_context()
            if producer.is_valid:
                links.append(Link(producer))
        return self.tracer.start_as_current_span(
            f"process {job.queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=links,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.destination.name": job.queue,
                "messaging.message.id": job.id,
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                "relaymq.task": job.task,
                "relaymq.attempt": job.attempts,
            },
            record_exception=False,
            set_status_on_exception=False,
        )

    def handler_raised(self, job: Job, error: BaseException) -> None:
        trace.get_current_span().record_exception(error)

    def attempt_ended(self, job: Job, settle: Settle | None, ran_for: float | None) -> None:
        span = trace.get_current_span()
        if settle is None:
            span.set_attribute("relaymq.outcome", "lost")
            span.set_status(Status(StatusCode.ERROR, "the claim was lost"))
            return
        span.set_attribute("relaymq.outcome", settle.outcome.value)
        if settle.outcome in FAILED:
            summary = (settle.error or "").strip().splitlines()
            span.set_status(Status(StatusCode.ERROR, summary[-1] if summary else None))


def instrument(tracer_provider: TracerProvider | None = None, *, app: App | None = None) -> Tracing:
    """Trace what ``app`` (default: the default app) enqueues and runs (see the module
    docstring); replaces an earlier ``instrument``. Returns the installed observer."""
    uninstrument(app=app)
    tracing = Tracing(tracer_provider)
    (app or default_app()).observe(tracing)
    return tracing


def uninstrument(*, app: App | None = None) -> None:
    """Stop tracing ``app`` (default: the default app; not instrumented: no change)."""
    app = app or default_app()
    for observer in app.observers:
        if isinstance(observer, Tracing):
            app.unobserve(observer)
