"""What operators are shown about jobs and workers, for the command line and the dashboard
alike: jobs and workers as plain values (the CLI's ``--json``, the dashboard's pages), times in
words, and the workers read through an app's facade with the jobs each is running."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from relaymq.backends.corrupt import CORRUPT
from relaymq.instrumented import Instrumented
from relaymq.job import Job, JobState
from relaymq.queue import Queue
from relaymq.records.store import WorkerInfo
from relaymq.serializers import DEFAULT_SERIALIZER

ACTIVE_PAGE = 1000
"""Active jobs read per call when finding each worker's running jobs (the active set is
bounded by the workers' concurrency)."""


def decoded(raw: bytes | None) -> Any:
    """A stored payload, result or progress decoded for display; undecodable bytes are shown
    as text rather than failing the command."""
    if raw is None:
        return None
    try:
        return DEFAULT_SERIALIZER.loads(raw)
    except Exception:
        return raw.decode("utf-8", "replace")


def job_dict(job: Job, *, full: bool = False) -> dict[str, Any]:
    """A job as JSON: the fields an operator reads; ``full`` adds arguments and result."""
    out: dict[str, Any] = {
        "queue": job.queue,
        "id": job.id,
        "task": job.task,
        "state": job.state.value,
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "created_at": job.created_at,
        "run_at": job.run_at,
        "finished_at": job.finished_at,
        "worker_id": job.worker_id,
        "error": job.error,
        "sequence": job.sequence,
    }
    if CORRUPT in job.extra:  # listed as far as it could be read: say what is wrong
        out[CORRUPT] = job.extra[CORRUPT]
    if full:
        out |= {
            "payload": decoded(job.payload),
            "progress": decoded(job.progress),
            "result": decoded(job.result),
            "token": job.token,
            "claimed_at": job.claimed_at,
            "heartbeat_at": job.heartbeat_at,
            "stalls": job.stalls,
            "ttl": job.ttl,
            "timeout": job.timeout,
            "cancel_requested": job.cancel_requested,
            "sequence_on_failure": None if job.sequence is None else job.sequence_on_failure.value,
            "extra": job.extra,
            "attempt_history": [a.to_record() for a in job.attempt_history],
        }
    return out


async def held_by(queue: Queue, job: Job) -> Job | None:
    """The job that ``job``'s sequence waits on, while ``job`` waits for it: the sequence's
    head (``Queue.sequence_head``: running, delayed, or dead-lettered and holding it) when
    that is another job and ``job`` has not started. None otherwise."""
    if job.sequence is None or job.state not in (JobState.WAITING, JobState.DELAYED):
        return None
    head = await queue.sequence_head(job.sequence)
    return head if head is not None and head.id != job.id else None


def waits_on(head: Job | None) -> dict[str, str] | None:
    """``held_by``'s answer as JSON: the head's id and state."""
    return None if head is None else {"id": head.id, "state": head.state.value}


def when(at: float | None) -> str:
    """An epoch time as local date and time, or '' when absent."""
    return "" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def age(at: float | None, now: float | None = None) -> str:
    """How long ago ``at`` was, short (``42s``, ``3m``, ``5h``, ``2d``)."""
    if at is None:
        return ""
    seconds = max(0.0, (now if now is not None else time.time()) - at)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def relative(at: float, now: float | None = None) -> str:
    """``at`` from now, short: ``5m ago``, ``in 58m`` or ``now``."""
    now = time.time() if now is None else now
    if abs(at - now) < 0.5:
        return "now"
    return f"{age(at, now)} ago" if at < now else f"in {age(now, at)}"


def worker_dict(
    info: WorkerInfo, running: list[tuple[str, str]], now: float, *, silent: bool = False
) -> dict[str, Any]:
    """A worker as JSON: its registration, the jobs it runs now (``running`` their number,
    ``jobs`` which), and whether it went ``silent``."""
    return {
        "id": info.id,
        "host": info.host,
        "pid": info.pid,
        "queues": list(info.queues),
        "concurrency": info.concurrency,
        "running": len(running),
        "jobs": [{"queue": q, "id": i} for q, i in running],
        "started_at": info.started_at,
        "uptime": max(0.0, now - info.started_at),
        "processed": info.processed,
        "failed": info.failed,
        "seen_at": info.seen_at,
        "heartbeat_age": max(0.0, now - info.seen_at),
        "silent": silent,
        "refused": dict(info.refused),
    }


async def collect_workers(ops: Instrumented) -> list[dict[str, Any]]:
    """Every live worker with the jobs it is running now, then the workers gone silent lately
    (``silent``: they stopped renewing their registration without unregistering), read
    through ``ops`` (an app's facade)."""
    workers = await ops.list_workers()
    silent = await ops.list_silent_workers()
    running: defaultdict[str, list[tuple[str, str]]] = defaultdict(list)
    for name in sorted({q for w in workers for q in w.queues}):
        queue, offset = Queue(name, ops), 0
        while True:
            page = await queue.list_jobs(JobState.ACTIVE, offset, ACTIVE_PAGE)
            for j in page:
                if j.worker_id:
                    running[j.worker_id].append((j.queue, j.id))
            if len(page) < ACTIVE_PAGE:
                break
            offset += len(page)
    now = time.time()
    live = [worker_dict(w, running[w.id], now) for w in sorted(workers, key=lambda w: w.id)]
    gone = [worker_dict(w, [], now, silent=True) for w in sorted(silent, key=lambda w: w.id)]
    return live + gone
