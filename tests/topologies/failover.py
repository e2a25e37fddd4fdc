"""A failover run: worker processes (the soak's) run jobs that append to a ledger while a
producer keeps enqueueing; mid-run a fault hits the topology (a primary killed and a replica
promoted, a cluster node killed); the run goes on until every job completed or the deadline.

Then the soak's checker classifies every job against the ledger (completed once; duplicated
and explained by the fault; unexplained; lost: acknowledged, then gone; stuck) and the run
reports, per worker, how long after the fault began it ran a job again. A producer's enqueue
that fails during the fault is repeated with the same job ids (a duplicate is answered as
such, never stored twice), so a lost job is one whose enqueue had returned.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from relaymq import Queue
from relaymq.backends import connect
from relaymq.errors import BackendError
from relaymq.job import JobState
from tests.soak import tasks
from tests.soak.checker import Facts, Report, check, read_ledger
from tests.soak.harness import read_all, retrying
from tests.soak.plan import Chaos, Target
from tests.soak.workers import Workers

BATCH = 10
"""Jobs per enqueue: small batches, so that enqueues are in flight when the fault comes."""


@dataclass
class Failover:
    topology: str
    setting: str
    """The durability setting the run used (replication mode, WAIT, ...)."""
    jobs: int
    fault: str
    report: Report
    fault_at: float = 0.0
    """Seconds into the run when the fault began."""
    accepted_before: int = 0
    """Jobs whose enqueue had returned when the fault began."""
    fault_seconds: float = 0.0
    """How long the fault itself took (kill, and promotion where the test promotes)."""
    resumed: list[float] = field(default_factory=list)
    """Per worker alive through the fault: seconds from the fault until it ran a job again."""

    @property
    def lost(self) -> int:
        return len(self.report.lost)

    @property
    def duplicates(self) -> int:
        return self.report.explained + len(self.report.unexplained)

    def problems(self) -> list[str]:
        """What no durability setting excuses: unexplained duplicates, stale writes, stuck
        jobs, workers that exited on their own, workers that never ran a job again."""
        r = self.report
        found = [*r.unexplained, *r.stale, *r.stuck, *r.worker_exits]
        if r.aborted:
            found.append(r.aborted)
        if not self.resumed:
            found.append("no worker ran a job after the fault")
        return found

    def row(self) -> str:
        """One line of the docs' table."""
        ordered = sorted(self.resumed) or [float("nan")]
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        return (
            f"| {self.topology} | {self.setting} | {self.jobs} | {self.fault}, "
            f"{self.fault_at:.1f}s in ({self.accepted_before} accepted) | "
            f"{statistics.median(ordered):.1f}s / {p99:.1f}s | {self.lost} | "
            f"{self.duplicates} (fault: {self.report.explained}) |"
        )


async def failover(
    topology: str,
    setting: str,
    url: str,
    fault: tuple[str, Callable[[], Awaitable[None]]],
    tmp: Path,
    *,
    jobs: int = 400,
    workers: int = 2,
    fault_after: float = 0.5,
    stalled_threshold: float = 1.5,
    deadline: float = 90.0,
) -> Failover:
    """Run ``jobs`` through ``workers`` processes on ``url``; ``fault`` (its name, and what
    does it) comes once ``fault_after`` of the jobs were accepted."""
    target = Target(topology, url, stalled_threshold=stalled_threshold)
    ledger = tmp / "ledger"
    ledger.mkdir(parents=True, exist_ok=True)
    name = f"topo-{int(time.time() * 1000) % 10**8:08d}"
    kinds = {f"j{i:06d}": "ok" for i in range(jobs)}
    backend = await connect(url)
    queue = Queue(name, backend)
    pool = Workers(target, name, ledger, tmp / "workers")
    chaos = Chaos()
    result = Failover(topology, setting, jobs, fault[0], Report(topology, jobs, stalled_threshold))
    began = time.monotonic()
    accepted = 0
    due = asyncio.Event()

    async def produce() -> None:
        nonlocal accepted
        ids = list(kinds)
        for at in range(0, len(ids), BATCH):
            calls = [tasks.step.with_options(job_id=i).call("ok") for i in ids[at : at + BATCH]]
            await retrying(lambda calls=calls: queue.add_bulk(calls), deadline)
            accepted += len(calls)
            if accepted >= fault_after * jobs:
                due.set()
            await asyncio.sleep(0.005)  # a steady stream, not one burst

    async def strike() -> None:
        await due.wait()
        result.accepted_before = accepted
        start = time.monotonic()
        result.fault_at = start - began
        await fault[1]()
        chaos.restarts.append((start, time.monotonic()))
        result.fault_seconds = time.monotonic() - start

    try:
        for _ in range(workers):
            await pool.start()
        await asyncio.gather(produce(), strike())
        while time.monotonic() - began < deadline:
            if await _completed(queue) >= jobs:
                break
            await asyncio.sleep(0.1)  # a pause between two looks at the counts
        result.report.seconds = time.monotonic() - began
    finally:
        await pool.stop()
    found = await read_all(queue, list(kinds))
    await backend.close()
    runs = read_ledger(ledger)
    facts = Facts.of(chaos, pool.host_of, {}, {}, stalled_threshold, deadline)
    check(result.report, kinds, found, runs, chaos, facts)
    result.report.worker_exits = [e.describe() for e in pool.exits]
    if chaos.restarts:
        fault_wall = chaos.restarts[0][0] + time.time() - time.monotonic()
        first_after: dict[int, float] = {}
        for job_runs in runs.values():
            for run in job_runs:
                if run.at > fault_wall and run.at < first_after.get(run.pid, float("inf")):
                    first_after[run.pid] = run.at
        result.resumed = sorted(at - fault_wall for at in first_after.values())
    return result


async def _completed(queue: Queue) -> int:
    try:
        return (await queue.counts()).get(JobState.COMPLETED, 0)
    except BackendError:
        return -1  # failing over
