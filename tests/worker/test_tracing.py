"""OpenTelemetry: the producer span of an enqueue and the consumer span of each attempt, joined
through the traceparent stored with the job, recorded by the SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from relaymq import JobFailedError, Queue, tracing
from relaymq.backends.sqlite import SQLiteBackend
from relaymq.errors import RelayError
from tests.support import observed_tasks as observed
from tests.worker.conftest import RunWorker

EXPORTER = InMemorySpanExporter()
PROVIDER = TracerProvider()
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    if trace.get_tracer_provider() is not PROVIDER:  # handlers' own spans: the global provider
        trace.set_tracer_provider(PROVIDER)
    EXPORTER.clear()
    tracing.instrument(PROVIDER)
    yield EXPORTER
    tracing.uninstrument()
    EXPORTER.clear()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def traceparent_of(span: ReadableSpan) -> str:
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


async def test_each_attempt_is_a_consumer_span_under_its_enqueue(
    queue: Queue, run_worker: RunWorker, spans: InMemorySpanExporter
) -> None:
    q = queue.name
    with trace.get_tracer("tests").start_as_current_span("request") as request:
        on_loop = await queue.add(observed.span_async.call("a"))
        in_thread = await queue.add(observed.span_thread.call("t"))
    async with run_worker():
        assert await on_loop.result(timeout=10) == "a"
        assert await in_thread.result(timeout=10) == "t"

    producers = {s.attributes["messaging.message.id"]: s for s in named(spans, f"send {q}")}  # type: ignore[index]
    consumers = {s.attributes["messaging.message.id"]: s for s in named(spans, f"process {q}")}  # type: ignore[index]
    assert set(producers) == set(consumers) == {on_loop.id, in_thread.id}
    for handle, key, task in (
        (on_loop, "a", observed.span_async.name),
        (in_thread, "t", observed.span_thread.name),
    ):
        producer, consumer = producers[handle.id], consumers[handle.id]
        assert producer.kind is SpanKind.PRODUCER and consumer.kind is SpanKind.CONSUMER
        assert producer.parent is not None
        assert producer.parent.span_id == request.get_span_context().span_id
        # the stored traceparent is the producer span's context...
        assert (await handle.job()).traceparent == traceparent_of(producer)
        # ...and the consumer span's parent and link are the producer span
        assert consumer.context.trace_id == producer.context.trace_id
        assert consumer.parent is not None and consumer.parent.span_id == producer.context.span_id
        assert [link.context.span_id for link in consumer.links] == [producer.context.span_id]
        assert dict(producer.attributes or {}) == {
            "messaging.system": "relaymq",
            "messaging.destination.name": q,
            "messaging.message.id": handle.id,
            "messaging.operation.type": "send",
            "messaging.operation.name": "enqueue",
            "relaymq.task": task,
        }
        assert dict(consumer.attributes or {}) == {
            "messaging.system": "relaymq",
            "messaging.destination.name": q,
            "messaging.message.id": handle.id,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "relaymq.task": task,
            "relaymq.attempt": 1,
            "relaymq.outcome": "complete",
        }
        assert consumer.status.status_code is StatusCode.UNSET
        # a span the handler opens (on the loop, or in its thread) is a child of the attempt
        [inner] = named(spans, f"inner {key}")
        assert inner.parent is not None and inner.parent.span_id == consumer.context.span_id


async def test_a_failed_attempt_records_its_exception_and_is_an_error(
    queue: Queue, run_worker: RunWorker, spans: InMemorySpanExporter
) -> None:
    handle = await queue.add(observed.log_and_fail.call("x"))  # retries=1: two attempts
    async with run_worker():
        with pytest.raises(JobFailedError):
            await handle.result(timeout=10)
    [producer] = named(spans, f"send {queue.name}")
    attempts = sorted(
        named(spans, f"process {queue.name}"), key=lambda s: (s.attributes or {})["relaymq.attempt"]
    )
    assert [(s.attributes or {})["relaymq.outcome"] for s in attempts] == ["retry", "fail"]
    for span in attempts:
        assert span.parent is not None and span.parent.span_id == producer.context.span_id
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "ValueError: x fails on purpose"
        [event] = span.events
        assert event.name == "exception"
        assert (event.attributes or {})["exception.type"] == "ValueError"


async def test_nothing_is_stored_or_traced_while_tracing_is_off(
    queue: Queue, run_worker: RunWorker, spans: InMemorySpanExporter
) -> None:
    tracing.uninstrument()
    handle = await queue.add(observed.log_async.call("off"))
    assert (await handle.job()).traceparent is None
    async with run_worker():
        await handle.result(timeout=10)
    assert spans.get_finished_spans() == ()


async def test_a_refused_enqueue_ends_its_span_as_an_error(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    backend = SQLiteBackend(f"sqlite:///{tmp_path}/missing.db")
    backend.create_missing = False
    with pytest.raises(RelayError):
        await Queue("nowhere", backend).add(observed.log_async.call("lost"))
    await backend.close()
    [producer] = named(spans, "send nowhere")
    assert producer.status.status_code is StatusCode.ERROR
    assert [e.name for e in producer.events] == ["exception"]
