"""Tasks the worker tests run. ``LEDGER`` counts side effects per key, in this process."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

from relaymq import JobContext, task

LEDGER: Counter[str] = Counter()
RUNNING: Counter[str] = Counter()
PEAK: Counter[str] = Counter()
ORDER: dict[str, list[str]] = {}
GATES: dict[str, asyncio.Event] = {}
STARTED: dict[str, asyncio.Event] = {}
SPANS: dict[str, list[tuple[int, str, float]]] = {}
BARRIERS: dict[str, threading.Barrier] = {}
THREAD_GATES: dict[str, threading.Event] = {}
THREAD_STARTED: dict[str, threading.Event] = {}
_lock = threading.Lock()


def gate(key: str) -> asyncio.Event:
    """An event a test sets to let ``wait_for_gate`` jobs finish."""
    return GATES.setdefault(key, asyncio.Event())


def started(key: str) -> asyncio.Event:
    """Set once a ``wait_for_gate`` job with ``key`` has started (in this process)."""
    return STARTED.setdefault(key, asyncio.Event())


def thread_gate(key: str) -> threading.Event:
    """An event a test sets to let ``block_thread`` jobs return."""
    with _lock:
        return THREAD_GATES.setdefault(key, threading.Event())


def thread_started(key: str) -> threading.Event:
    """Set once a ``block_thread`` job with ``key`` runs in its thread."""
    with _lock:
        return THREAD_STARTED.setdefault(key, threading.Event())


@task(queue="tests")
async def add(a: int, b: int) -> int:
    LEDGER[f"add:{a}:{b}"] += 1
    return a + b


@task(queue="tests")
def multiply(a: int, b: int) -> int:
    """A plain function: runs in the thread pool."""
    assert threading.current_thread() is not threading.main_thread()
    return a * b


@task(queue="tests", retries=2, backoff=0.01)
async def fail_once(key: str) -> int:
    LEDGER[key] += 1
    if LEDGER[key] == 1:
        raise RuntimeError(f"first attempt of {key} fails")
    return LEDGER[key]


@task(queue="tests")
async def with_context(ctx: JobContext, label: str) -> dict[str, Any]:
    ctx.progress({"label": label, "pct": 50})
    return {"job_id": ctx.job_id, "attempt": ctx.attempt, "queue": ctx.queue}


@task(queue="tests", retries=1, backoff=0.01)
async def always_fail(key: str) -> None:
    LEDGER[key] += 1
    raise ValueError(f"{key} always fails")


@task(queue="tests")
async def record_order(key: str, label: str) -> None:
    """Appends ``label`` to ``ORDER[key]``: the order in which jobs started."""
    ORDER.setdefault(key, []).append(label)


@task(queue="tests")
async def sequence_step(key: str, label: str) -> None:
    """Appends ``label`` to ``ORDER[key]`` and counts how many of ``key`` run at once
    (``PEAK``), letting other jobs run meanwhile."""
    ORDER.setdefault(key, []).append(label)
    with _lock:
        RUNNING[key] += 1
        PEAK[key] = max(PEAK[key], RUNNING[key])
    for _ in range(3):
        await asyncio.sleep(0)  # others' turn: a second job of the key would start now
    with _lock:
        RUNNING[key] -= 1


@task(queue="tests")
async def wait_for_gate(key: str) -> str:
    """Counts how many run at once, then blocks until the test opens the gate."""
    LEDGER[key] += 1
    with _lock:
        RUNNING[key] += 1
        PEAK[key] = max(PEAK[key], RUNNING[key])
    started(key).set()
    try:
        await gate(key).wait()
    finally:
        with _lock:
            RUNNING[key] -= 1
    return key


@task(queue="tests", timeout=0.2)
async def too_slow(key: str) -> None:
    LEDGER[key] += 1
    await asyncio.sleep(30)


@task(queue="tests")
async def bad_result(key: str) -> object:
    LEDGER[key] += 1
    return object()


@task(queue="tests")
def blocking_sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@task(queue="tests")
def hang_first_attempt(ctx: JobContext, marker: str) -> int:
    """First attempt: leaves a side-effect mark, then hangs (the test kills its process)."""
    with open(marker, "a") as f:
        f.write(f"{ctx.attempt}\n")
    if ctx.attempt == 1:
        time.sleep(3600)
    return ctx.attempt


@task(queue="tests", timeout=0.2, retries=1, backoff=0.01)
def overrun_timeout(ctx: JobContext, key: str, seconds: float) -> int:
    """A plain function that overruns its timeout on its first attempt; records (attempt,
    "start" or "end", monotonic time) in ``SPANS[key]``."""
    SPANS.setdefault(key, []).append((ctx.attempt, "start", time.monotonic()))
    if ctx.attempt == 1:
        time.sleep(seconds)
    SPANS[key].append((ctx.attempt, "end", time.monotonic()))
    return ctx.attempt


@task(queue="tests")
def meet(key: str, parties: int) -> int:
    """A plain function that returns once ``parties`` of them run at the same time; fails
    (``BrokenBarrierError``) if that does not happen within 5 s."""
    with _lock:
        barrier = BARRIERS.setdefault(key, threading.Barrier(parties, timeout=5))
    return barrier.wait()


@task(queue="tests")
async def block_loop(key: str) -> str:
    """An async handler that blocks the event loop (no await) until the test sets
    ``thread_gate(key)`` from another thread: what the worker's loop watch is for."""
    LEDGER[key] += 1
    thread_started(key).set()
    if not thread_gate(key).wait(30):
        raise TimeoutError("the test never opened the gate")
    return key


@task(queue="tests")
def block_thread(key: str) -> str:
    """A plain function that blocks its thread until the test sets ``thread_gate(key)``."""
    LEDGER[key] += 1
    thread_started(key).set()
    if not thread_gate(key).wait(30):
        raise TimeoutError("the test never opened the gate")
    return key


@task(queue="tests")
async def gather(ctx: JobContext, label: str) -> dict[str, Any]:
    """What a flow's parent sees of its children: their results and, under "include", how the
    others ended."""
    return {"label": label, "results": ctx.results, "failed": ctx.failed}
