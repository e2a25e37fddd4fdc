"""Prometheus metrics, scraped after real jobs ran on a real backend: exact counter, histogram
and gauge values, through the registry, the ASGI app and the HTTP server."""

from __future__ import annotations

import asyncio
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from relaymq import JobFailedError, JobState, Queue
from relaymq.app import default_app
from relaymq.backends.base import Backend
from relaymq.backends.sqlite import SQLiteBackend
from relaymq.metrics import Metrics, asgi_app
from relaymq.records.limits import Limits
from relaymq.records.store import Outcome, Settle
from relaymq.testing import FakeClock
from tests import tasks
from tests.conftest import MakeBackend
from tests.support.jobs import new_job, remove_job
from tests.worker.conftest import RunWorker


@pytest.fixture
def metrics() -> Iterator[Metrics]:
    m = Metrics(CollectorRegistry()).install()
    yield m
    m.uninstall()


def sample(m: Metrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


async def test_counters_histograms_and_gauges_after_running_jobs(
    queue: Queue, run_worker: RunWorker, metrics: Metrics
) -> None:
    q, add, fail = queue.name, tasks.add.name, tasks.always_fail.name
    metrics.watch(queue.backend, [q])
    done = [await queue.add(tasks.add.call(i, 1)) for i in range(2)]
    done.append(await queue.add(tasks.add.with_options(job_id="dup").call(5, 5)))
    again = await queue.add(tasks.add.with_options(job_id="dup").call(5, 5))
    assert again.duplicate
    failing = await queue.add(tasks.always_fail.call("m"))  # retries=1: retried, then failed
    await queue.add(tasks.add.with_options(delay=3600).call(0, 0))  # stays delayed
    cancelled = await queue.add(tasks.add.with_options(delay=3600).call(0, 1))
    await queue.cancel(cancelled.id)  # an operator's cancel: no worker outcome
    async with run_worker():
        for handle in done:
            await handle.result(timeout=10)
        with pytest.raises(JobFailedError):
            await failing.result(timeout=10)

    assert sample(metrics, "relaymq_jobs_enqueued_total", queue=q, task=add) == 5
    assert sample(metrics, "relaymq_jobs_deduplicated_total", queue=q, task=add) == 1
    assert sample(metrics, "relaymq_jobs_enqueued_total", queue=q, task=fail) == 1
    assert sample(metrics, "relaymq_jobs_completed_total", queue=q, task=add) == 3
    assert sample(metrics, "relaymq_jobs_completed_total", queue=q, task=fail) == 0
    assert sample(metrics, "relaymq_jobs_retried_total", queue=q, task=fail) == 1
    assert sample(metrics, "relaymq_jobs_failed_total", queue=q, task=fail) == 1
    for word in ("expired", "cancelled", "released"):
        assert sample(metrics, f"relaymq_jobs_{word}_total", queue=q, task=add) == 0
    assert sample(metrics, "relaymq_claims_lost_total", queue=q, task=add) == 0
    durations = "relaymq_job_duration_seconds_count"
    assert sample(metrics, durations, queue=q, task=add, outcome="completed") == 3
    assert sample(metrics, durations, queue=q, task=fail, outcome="retried") == 1
    assert sample(metrics, durations, queue=q, task=fail, outcome="failed") == 1
    latency = "relaymq_job_pickup_latency_seconds_count"
    assert sample(metrics, latency, queue=q, task=add) == 3  # first attempts only
    assert sample(metrics, latency, queue=q, task=fail) == 1
    assert sample(metrics, "relaymq_backend_call_duration_seconds_count", op="enqueue") == 7
    assert (sample(metrics, "relaymq_backend_call_duration_seconds_count", op="claim") or 0) >= 2

    await metrics.refresh()
    expected = {
        JobState.COMPLETED: 3,
        JobState.FAILED: 1,
        JobState.DELAYED: 1,
        JobState.CANCELLED: 1,
    }
    for state in JobState:
        value = sample(metrics, "relaymq_queue_jobs", queue=q, state=state.value)
        assert value == expected.get(state, 0), state
    assert sample(metrics, "relaymq_queue_paused", queue=q) == 0
    assert sample(metrics, "relaymq_backend_up") == 1


async def test_lost_claims_and_stalled_recovery_are_counted(
    make_backend: MakeBackend, q: str, metrics: Metrics
) -> None:
    clock = FakeClock()
    backend = await make_backend(clock)
    ops = default_app().over(backend).ops  # the app whose observers the metrics are
    await ops.enqueue([new_job(q, "s", task="t.stalls")])
    [first] = (await ops.claim([q], "w1", 1)).jobs
    clock.advance(60)
    found = await ops.recover_stalled(q, threshold=30, max_stalled=1)
    assert found.requeued == ["s"]
    # the first worker comes back and completes with its old claim: refused, a lost claim
    assert await ops.settle([(first, Settle(first.claim, Outcome.COMPLETE, result=b"1"))]) == [
        False
    ]
    [second] = (await ops.claim([q], "w2", 1)).jobs
    clock.advance(60)
    found = await ops.recover_stalled(q, threshold=30, max_stalled=1)
    assert found.failed == ["s"]
    assert second.attempts == 2
    assert sample(metrics, "relaymq_stalled_jobs_total", queue=q, outcome="requeued") == 1
    assert sample(metrics, "relaymq_stalled_jobs_total", queue=q, outcome="failed") == 1
    assert sample(metrics, "relaymq_claims_lost_total", queue=q, task="t.stalls") == 1
    assert sample(metrics, "relaymq_jobs_completed_total", queue=q, task="t.stalls") == 0
    assert (
        sample(metrics, "relaymq_job_pickup_latency_seconds_count", queue=q, task="t.stalls") == 1
    )


async def test_a_claim_lost_while_running_is_counted(
    queue: Queue, run_worker: RunWorker, metrics: Metrics
) -> None:
    key = f"lost-{queue.name}"
    async with run_worker() as worker:
        handle = await queue.add(tasks.wait_for_gate.call(key))
        await worker.until(lambda s: s.claimed >= 1, "the claim")
        await remove_job(queue.backend, queue.name, handle.id)
        await worker.wait_idle()  # the next heartbeat finds the claim lost, stops the handler
    task = tasks.wait_for_gate.name
    assert sample(metrics, "relaymq_claims_lost_total", queue=queue.name, task=task) == 1
    assert (
        sample(
            metrics,
            "relaymq_job_duration_seconds_count",
            queue=queue.name,
            task=task,
            outcome="lost",
        )
        == 1
    )


async def test_scrape_storms_share_one_reading(live: Backend, q: str, metrics: Metrics) -> None:
    gauges = metrics.watch(live, [q], max_age=60)
    await live.enqueue([new_job(q)])
    await asyncio.gather(*(metrics.refresh() for _ in range(20)))
    assert gauges.reads == 1
    await live.enqueue([new_job(q)])
    for _ in range(5):
        await metrics.refresh()
        assert sample(metrics, "relaymq_queue_jobs", queue=q, state="waiting") == 1  # cached
    assert gauges.reads == 1
    await gauges.refresh(force=True)
    assert sample(metrics, "relaymq_queue_jobs", queue=q, state="waiting") == 2
    assert gauges.reads == 2


async def test_the_jobs_held_back_by_the_limits_are_a_gauge(
    live: Backend, q: str, metrics: Metrics
) -> None:
    metrics.watch(live, [q], max_age=0)
    await metrics.refresh()
    assert sample(metrics, "relaymq_queue_held_back_jobs", queue=q) is None  # no limits
    await live.set_limits(q, Limits(key_max_active=1))
    await live.enqueue([new_job(q, limit_key=k) for k in ("a", "a", "a", "b")])
    async with asyncio.timeout(10):  # the broker delivering what the store made eligible
        while (await live.counts(q))[JobState.ACTIVE] < 2:
            await live.claim([q], "w", 10)
    await metrics.refresh()
    assert sample(metrics, "relaymq_queue_held_back_jobs", queue=q) == 2  # a's two others


async def call_asgi(app: Any, path: str = "/") -> tuple[int, dict[bytes, bytes], bytes]:
    """One GET through an ASGI app, without a server."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": b"",
        "headers": [],
        "http_version": "1.1",
        "scheme": "http",
        "root_path": "",
    }
    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body


async def test_the_asgi_app_reads_the_gauges_before_serving(
    live: Backend, q: str, metrics: Metrics
) -> None:
    metrics.watch(live, [q], max_age=0)
    await live.enqueue([new_job(q), new_job(q), new_job(q, delay=60)])
    status, headers, body = await call_asgi(asgi_app(metrics), "/metrics")
    assert status == 200 and headers[b"Content-Type"].startswith(b"text/plain")
    text = body.decode()
    assert f'relaymq_queue_jobs{{queue="{q}",state="waiting"}} 2.0' in text
    assert f'relaymq_queue_jobs{{queue="{q}",state="delayed"}} 1.0' in text
    assert "relaymq_backend_up 1.0" in text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_the_http_server_reads_the_gauges_through_the_loop(
    live: Backend, q: str, metrics: Metrics
) -> None:
    metrics.watch(live, [q], max_age=0)
    await metrics.refresh()  # the gauges learn their loop
    await live.enqueue([new_job(q)])
    port = free_port()
    server = metrics.serve(port, "127.0.0.1")
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())
    finally:
        server.shutdown()
        server.server_close()
    assert f'relaymq_queue_jobs{{queue="{q}",state="waiting"}} 1.0' in text.decode()


async def test_a_backend_that_cannot_answer_reads_as_down(tmp_path: Path) -> None:
    m = Metrics(CollectorRegistry())
    backend = SQLiteBackend(f"sqlite:///{tmp_path}/missing.db")
    backend.create_missing = False  # every call fails: there is no database
    m.watch(backend, ["q"], max_age=0)
    await m.refresh()
    assert sample(m, "relaymq_backend_up") == 0
    assert sample(m, "relaymq_queue_jobs", queue="q", state="waiting") is None
    await backend.close()


async def test_without_install_nothing_is_counted(live: Backend, q: str) -> None:
    m = Metrics(CollectorRegistry())
    handle = await Queue(q, live).add(tasks.add.call(1, 1))
    assert not handle.duplicate
    assert sample(m, "relaymq_jobs_enqueued_total", queue=q, task=tasks.add.name) is None
    m.install()
    m.uninstall()
    await Queue(q, live).add(tasks.add.call(1, 1))
    assert sample(m, "relaymq_jobs_enqueued_total", queue=q, task=tasks.add.name) is None
