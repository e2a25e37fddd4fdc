"""Prometheus metrics: what this process's queues and workers did, and what every queue holds.

    metrics = Metrics()                  # the default registry; Metrics(CollectorRegistry())
    metrics.install()                    # count what Queue, Worker and recovery do here
    metrics.watch(backend, ["emails"])   # per-queue gauges, read from counts() when scraped
    server = metrics.serve(9100)         # GET /metrics on a thread (server.shutdown() ends it)
    app = asgi_app(metrics)              # or mount it in any ASGI app (Starlette: Mount)

``relaymq worker --metrics-port N`` does the first four. Counters count what happened in this
process (sum them over processes); the gauges are the backend's view, the same from anywhere.

Counters (labels ``queue``, ``task``):

- ``relaymq_jobs_enqueued_total``, ``relaymq_jobs_deduplicated_total``: enqueues;
- ``relaymq_jobs_completed_total``, ``..._retried_total``, ``..._failed_total``,
  ``..._expired_total``, ``..._cancelled_total``, ``..._released_total``: outcomes written;
- ``relaymq_claims_lost_total``: outcomes refused and handlers stopped because the job was
  another worker's (or removed) by then;
- ``relaymq_stalled_jobs_total`` (labels ``queue``, ``outcome``: ``requeued``, or ``failed``
  past ``max_stalled``): stalled recovery;
- ``relaymq_backend_call_errors_total`` (label ``op``, the backend method: ``claim``,
  ``settle``, ``settle_and_claim``, ...): backend calls that raised.

Histograms, in seconds:

- ``relaymq_job_duration_seconds`` (``queue``, ``task``, ``outcome``: ``completed``,
  ``retried``, ``failed``, ``cancelled``, ``released`` or ``lost``): handlers' run time;
- ``relaymq_job_pickup_latency_seconds`` (``queue``, ``task``): first attempts, from the job's
  run time (or enqueue time) to its claim, both on the backend's clock;
- ``relaymq_backend_call_duration_seconds`` (``op``): backend calls (not idle waits).

Gauges: ``relaymq_queue_jobs`` (``queue``, ``state``), ``relaymq_queue_paused`` (``queue``: 1
while paused), ``relaymq_backend_up`` (1 when the last reading of the gauges succeeded),
``relaymq_queue_held_back_jobs`` (``queue``, for queues with limits: the waiting jobs its
limits hold back, ``relaymq.keyusage``).

The gauges are read when scraped, at most once per ``max_age`` seconds however many scrapers
ask (a cached reading is served meanwhile): ``counts`` is O(1) per queue on every backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping, Sequence
from typing import Any

try:
    import prometheus_client
    from prometheus_client import CollectorRegistry, Counter, Histogram
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError as e:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "relaymq.metrics needs prometheus-client: pip install 'relaymq[metrics]'"
    ) from e

from relaymq.app import App, default_app
from relaymq.backends.base import Backend
from relaymq.instrumented import Instrumented
from relaymq.job import Job, JobState, NewJob
from relaymq.keyusage import key_usage
from relaymq.observers import Observer
from relaymq.records.store import OUTCOME_WORDS, Enqueued, Outcome, Recovered, Settle

__all__ = ["Metrics", "QueueGauges", "asgi_app", "process_metrics"]

log = logging.getLogger("relaymq.metrics")


DURATION_BUCKETS = tuple(
    map(float, "0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 600 1800 3600".split())
)
LATENCY_BUCKETS = tuple(
    map(float, "0.001 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 300 900 3600".split())
)
CALL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

UNTIMED_CALLS = frozenset({"wait"})
"""Backend calls whose duration means nothing (an idle worker's wait blocks on purpose)."""

ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]


class _PerTask:
    """The label children of one (queue, task): one dict lookup per event on the hot path."""

    __slots__ = ("deduplicated", "durations", "enqueued", "lost", "outcomes", "pickup")

    def __init__(self, m: Metrics, queue: str, task: str) -> None:
        self.enqueued = m.jobs_enqueued.labels(queue, task)
        self.deduplicated = m.jobs_deduplicated.labels(queue, task)
        self.outcomes = {o: m.outcomes[o].labels(queue, task) for o in Outcome}
        self.lost = m.claims_lost.labels(queue, task)
        self.pickup = m.pickup_latency.labels(queue, task)
        self.durations = {
            name: m.duration.labels(queue, task, name) for name in (*OUTCOME_WORDS.values(), "lost")
        }


class _Timed:
    """Times one backend call; counts it as an error when it raised."""

    __slots__ = ("began", "errors", "seconds")

    def __init__(self, seconds: Any, errors: Any) -> None:
        self.seconds = seconds
        self.errors = errors
        self.began = 0.0

    def __enter__(self) -> _Timed:
        self.began = time.perf_counter()
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self.seconds.observe(time.perf_counter() - self.began)
        if kind is not None and issubclass(kind, Exception):
            self.errors.inc()


class Metrics(Observer):
    """relaymq's metrics on ``registry`` (default: prometheus_client's global one, so they are
    served beside the process's other metrics; pass a ``CollectorRegistry`` to keep them apart).

    Nothing is counted until ``install()``; two ``Metrics`` on one registry are refused by
    prometheus_client (the names are taken)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = prometheus_client.REGISTRY if registry is None else registry
        r = self.registry
        labels = ("queue", "task")
        self.jobs_enqueued = Counter(
            "relaymq_jobs_enqueued_total",
            "New jobs stored by producers in this process.",
            labels,
            registry=r,
        )
        self.jobs_deduplicated = Counter(
            "relaymq_jobs_deduplicated_total",
            "Enqueues that found the job id taken (nothing stored).",
            labels,
            registry=r,
        )
        self.outcomes = {
            outcome: Counter(
                f"relaymq_jobs_{name}_total",
                f"Attempts that ended {name}, written by workers in this process.",
                labels,
                registry=r,
            )
            for outcome, name in OUTCOME_WORDS.items()
        }
        self.claims_lost = Counter(
            "relaymq_claims_lost_total",
            "Claims found lost by workers in this process: the job "
            "belonged to another worker (or was removed) by then.",
            labels,
            registry=r,
        )
        self.stalled = Counter(
            "relaymq_stalled_jobs_total",
            "Stalled jobs recovered (outcome: requeued, or failed past "
            "max_stalled) by maintenance in this process.",
            ("queue", "outcome"),
            registry=r,
        )
        self.duration = Histogram(
            "relaymq_job_duration_seconds",
            "How long handlers ran, by the attempt's outcome.",
            (*labels, "outcome"),
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.pickup_latency = Histogram(
            "relaymq_job_pickup_latency_seconds",
            "First attempts: from the job's run time (or enqueue "
            "time) to its claim, on the backend's clock.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.call_duration = Histogram(
            "relaymq_backend_call_duration_seconds",
            "Backend calls made by this process, by operation.",
            ("op",),
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self.call_errors = Counter(
            "relaymq_backend_call_errors_total",
            "Backend calls that raised, by operation.",
            ("op",),
            registry=r,
        )
        self.gauges: QueueGauges | None = None
        self._per_task: dict[tuple[str, str], _PerTask] = {}
        self._calls: dict[str, tuple[Any, Any]] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def install(self, app: App | None = None) -> Metrics:
        """Start counting what ``app`` (default: the default app) does here (again: no
        change); returns ``self``."""
        (app or default_app()).observe(self)
        return self

    def uninstall(self, app: App | None = None) -> None:
        """Stop counting; the values counted so far stay on the registry."""
        (app or default_app()).unobserve(self)

    def watch(
        self,
        backend: Instrumented | Backend,
        queues: Sequence[str] | None = None,
        *,
        max_age: float = 5.0,
        timeout: float = 5.0,
    ) -> QueueGauges:
        """Serve per-queue gauges of ``queues`` (None: every queue the backend lists), read
        from ``backend`` when scraped, at most once per ``max_age`` seconds. Replaces what an
        earlier ``watch`` set up."""
        if self.gauges is not None:
            self.registry.unregister(self.gauges)
        self.gauges = QueueGauges(backend, queues, max_age=max_age, timeout=timeout)
        self.registry.register(self.gauges)
        return self.gauges

    async def refresh(self) -> None:
        """Read the gauges now unless the last reading is younger than ``max_age``."""
        if self.gauges is not None:
            await self.gauges.refresh()

    def serve(self, port: int, addr: str = "0.0.0.0") -> Any:
        """Serve ``GET /metrics`` on ``addr:port`` from a daemon thread; the gauges are read
        through the event loop that last refreshed them (``await refresh()`` once first).
        Returns the server: ``shutdown()`` stops it."""
        server, _thread = prometheus_client.start_http_server(port, addr, registry=self.registry)
        return server

    # -- what the core tells -----------------------------------------------------------------

    def _of(self, queue: str, task: str) -> _PerTask:
        found = self._per_task.get((queue, task))
        if found is None:
            found = self._per_task[(queue, task)] = _PerTask(self, queue, task)
        return found

    def call(self, op: str) -> contextlib.AbstractContextManager[object] | None:
        if op in UNTIMED_CALLS:
            return None
        children = self._calls.get(op)
        if children is None:
            children = self._calls[op] = (
                self.call_duration.labels(op),
                self.call_errors.labels(op),
            )
        return _Timed(*children)

    def enqueued(
        self,
        jobs: Sequence[NewJob],
        answers: Sequence[Enqueued] | None,
        error: BaseException | None,
    ) -> None:
        if answers is None:
            return
        for job, answer in zip(jobs, answers, strict=True):
            m = self._of(job.queue, job.task)
            (m.deduplicated if answer.duplicate else m.enqueued).inc()

    def claimed(self, jobs: Sequence[Job]) -> None:
        for job in jobs:
            if job.attempts != 1 or job.claimed_at is None:
                continue
            since = job.run_at if job.run_at is not None else job.created_at
            self._of(job.queue, job.task).pickup.observe(max(0.0, job.claimed_at - since))

    def attempt_ended(self, job: Job, settle: Settle | None, ran_for: float | None) -> None:
        if ran_for is None:
            return
        name = "lost" if settle is None else OUTCOME_WORDS[settle.outcome]
        self._of(job.queue, job.task).durations[name].observe(ran_for)

    def settled(self, job: Job, settle: Settle, applied: bool) -> None:
        m = self._of(job.queue, job.task)
        if applied or settle.outcome is Outcome.CANCEL:  # a refused cancel: cancelled already
            m.outcomes[settle.outcome].inc()
        else:
            m.lost.inc()

    def claim_lost(self, job: Job) -> None:
        self._of(job.queue, job.task).lost.inc()

    def recovered(self, queue: str, found: Recovered) -> None:
        if found.requeued:
            self.stalled.labels(queue, "requeued").inc(len(found.requeued))
        if found.failed:
            self.stalled.labels(queue, "failed").inc(len(found.failed))


_process_metrics: Metrics | None = None


def process_metrics() -> Metrics:
    """This process's ``Metrics`` on prometheus_client's default registry, made on first use
    (a registry takes each name once); not installed until ``install()``."""
    global _process_metrics
    if _process_metrics is None:
        _process_metrics = Metrics()
    return _process_metrics


Snapshot = tuple[dict[str, dict[JobState, int]], dict[str, bool], bool, dict[str, int]]


class QueueGauges(Collector):
    """Per-queue gauges read from a backend when scraped, cached for ``max_age`` seconds.

    Readings happen on the event loop the backend belongs to: ``refresh()`` there (the ASGI
    app does before each scrape), or ``collect()`` from another thread (prometheus_client's
    HTTP server), which asks that loop and waits up to ``timeout``. On the loop's own thread
    ``collect()`` never blocks: it serves the last reading."""

    def __init__(
        self,
        backend: Instrumented | Backend,
        queues: Sequence[str] | None = None,
        *,
        max_age: float = 5.0,
        timeout: float = 5.0,
    ) -> None:
        raw = backend.backend if isinstance(backend, Instrumented) else backend
        self.ops = Instrumented(raw)
        """Where the gauges are read: a facade of its own, so the reads are not counted."""
        self.queues = list(queues) if queues is not None else None
        self.max_age = max_age
        self.timeout = timeout
        self.reads = 0
        """How many times the backend was read (scrapes served from the cache do not count)."""
        self._snapshot: Snapshot = ({}, {}, False, {})
        self._read_at: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None

    def _fresh(self) -> bool:
        return self._read_at is not None and time.monotonic() - self._read_at < self.max_age

    async def refresh(self, *, force: bool = False) -> None:
        """Read every queue's counts and paused flag, unless the last reading is younger than
        ``max_age`` (``force``: read anyway). A failure is logged and served as
        ``relaymq_backend_up 0`` with no per-queue samples; it never raises."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._lock = loop, asyncio.Lock()
        assert self._lock is not None
        if self._fresh() and not force:
            return
        async with self._lock:  # a storm of scrapes shares one reading
            if self._fresh() and not force:
                return
            self.reads += 1
            try:
                async with asyncio.timeout(self.timeout):
                    names = self.queues
                    if names is None:
                        names = await self.ops.list_queues()
                    counts = await asyncio.gather(*(self.ops.counts(q) for q in names))
                    paused = await asyncio.gather(*(self.ops.is_paused(q) for q in names))
                    limits = await self.ops.list_limits()
                    limited = [q for q in names if q in limits]
                    usage = await asyncio.gather(
                        *(key_usage(self.ops, q, limits[q], top=0) for q in limited)
                    )
                self._snapshot = (
                    dict(zip(names, counts, strict=True)),
                    dict(zip(names, paused, strict=True)),
                    True,
                    {q: u.held_back for q, u in zip(limited, usage, strict=True)},
                )
            except Exception as e:
                log.warning("metrics: could not read the queues' counts: %s", e)
                self._snapshot = ({}, {}, False, {})
            self._read_at = time.monotonic()

    def _refresh_from_another_thread(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed() or not loop.is_running():
            return
        with contextlib.suppress(RuntimeError):
            if asyncio.get_running_loop() is loop:
                return  # never block the loop the reading needs: serve the last one
        future = asyncio.run_coroutine_threadsafe(self.refresh(), loop)
        try:
            future.result(self.timeout + 1.0)
        except Exception:
            future.cancel()

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        if not self._fresh():
            self._refresh_from_another_thread()
        counts, paused, up, held = self._snapshot
        jobs, paused_family, up_family, held_family = self._families()
        for queue, by_state in counts.items():
            for state in JobState:
                jobs.add_metric([queue, state.value], by_state.get(state, 0))
        for queue, flag in paused.items():
            paused_family.add_metric([queue], 1.0 if flag else 0.0)
        up_family.add_metric([], 1.0 if up else 0.0)
        for queue, n in held.items():
            held_family.add_metric([queue], n)
        yield from (jobs, paused_family, up_family, held_family)

    @staticmethod
    def _families() -> tuple[
        GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily
    ]:
        return (
            GaugeMetricFamily(
                "relaymq_queue_jobs", "Jobs in the queue, per state.", labels=["queue", "state"]
            ),
            GaugeMetricFamily(
                "relaymq_queue_paused", "1 while the queue is paused.", labels=["queue"]
            ),
            GaugeMetricFamily(
                "relaymq_backend_up", "1 when the last reading of the queue gauges succeeded."
            ),
            GaugeMetricFamily(
                "relaymq_queue_held_back_jobs",
                "Waiting jobs the queue's limits hold back (max_active reached, or their "
                "key at key_max_active).",
                labels=["queue"],
            ),
        )


def asgi_app(metrics: Metrics) -> ASGIApp:
    """An ASGI app serving ``metrics.registry`` in the Prometheus text format (or OpenMetrics,
    when asked), whatever the path: mount it where it should answer. The queue gauges are
    refreshed on the serving loop before each scrape, at most once per ``max_age``."""
    inner = prometheus_client.make_asgi_app(metrics.registry)

    async def app(
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] == "lifespan":  # served on its own (uvicorn): nothing to set up
            while True:
                kind = (await receive())["type"]
                if kind == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif kind == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await metrics.refresh()
        await inner(scope, receive, send)

    return app
