"""Tasks for the observability tests: they log, open spans and fail, through the user's own
``logging`` and OpenTelemetry API (as any handler would)."""

from __future__ import annotations

import logging
import threading

from opentelemetry import trace

from relaymq import task

log = logging.getLogger("tests.handler")
tracer = trace.get_tracer("tests.handler")


@task(queue="tests")
async def log_async(key: str) -> str:
    log.info("async handler says %s", key)
    return key


@task(queue="tests")
def log_thread(key: str) -> str:
    """A plain function: runs in one of the worker's threads."""
    assert threading.current_thread() is not threading.main_thread()
    log.info("threaded handler says %s", key)
    return key


@task(queue="tests", retries=1, backoff=0.01)
async def log_and_fail(key: str) -> None:
    log.warning("failing attempt for %s", key)
    raise ValueError(f"{key} fails on purpose")


@task(queue="tests")
async def span_async(key: str) -> str:
    with tracer.start_as_current_span(f"inner {key}"):
        return key


@task(queue="tests")
def span_thread(key: str) -> str:
    with tracer.start_as_current_span(f"inner {key}"):
        return key
