"""The demo: enqueue a mix of jobs, run two worker processes, SIGKILL one mid-run, then check
from the backend and the side-effect ledgers that every job ended as it should, nothing was
lost, and every duplicate execution is explained by the kill."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from relaymq import App, Call, Queue, events
from relaymq.demo import tasks
from relaymq.job import TERMINAL, Job, JobState

console = Console()
DEADLINE = 50.0
KILL_AT = 0.35
"""Fraction of jobs finished when worker 1 is killed."""


@dataclass(frozen=True)
class Kind:
    name: str
    share: float
    state: JobState
    executions: int
    """Handler executions a job of this kind needs when no process dies."""


KINDS = [
    Kind("ok", 0.70, JobState.COMPLETED, 1),
    Kind("flaky", 0.10, JobState.COMPLETED, 2),
    Kind("doomed", 0.05, JobState.FAILED, 2),
    Kind("delayed", 0.05, JobState.COMPLETED, 1),
    Kind("ttl", 0.05, JobState.EXPIRED, 0),
    Kind("cancelled", 0.05, JobState.CANCELLED, 0),
]


def plan(total: int) -> list[tuple[Kind, str, Call[int]]]:
    jobs: list[tuple[Kind, str, Call[int]]] = []
    for kind in KINDS:
        for i in range(max(1, round(total * kind.share))):
            job_id = f"{kind.name}-{i}"
            jobs.append((kind, job_id, _call(kind, job_id, i)))
    order = sorted(range(len(jobs)), key=lambda k: hash(jobs[k][1]))  # mix the kinds
    return [jobs[k] for k in order]


def _call(kind: Kind, job_id: str, i: int) -> Call[int]:
    if kind.name == "flaky":
        return tasks.flaky.with_options(job_id=job_id).call(i)
    if kind.name == "doomed":
        return tasks.doomed.with_options(job_id=job_id).call(i)
    if kind.name == "delayed":
        return tasks.ok.with_options(job_id=job_id, delay=1 + i % 3).call(i)
    if kind.name == "ttl":  # becomes due after its TTL has passed: must expire, never run
        return tasks.ok.with_options(job_id=job_id, delay=2, ttl=1).call(i)
    if kind.name == "cancelled":
        return tasks.ok.with_options(job_id=job_id, delay=5).call(i)
    return tasks.ok.with_options(job_id=job_id).call(i)


def run_demo(jobs: int = 2000, keep: bool = False) -> int:
    folder = Path(tempfile.mkdtemp(prefix="relaymq-demo-"))
    try:
        return asyncio.run(_demo(folder, jobs))
    finally:
        if keep:
            console.print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


async def _demo(folder: Path, total: int) -> int:
    url = f"sqlite:///{folder / 'demo.db'}"
    ledger = folder / "ledger"
    ledger.mkdir()
    console.print(f"[bold]relaymq demo[/]: {total} jobs, 2 workers, backend {url}")
    app = App(url)
    ops = await app.connect()
    workers: dict[str, asyncio.subprocess.Process] = {}
    online = await ops.subscribe()
    try:
        for wid in ("demo-w1", "demo-w2"):
            workers[wid] = await _start_worker(wid, url, folder)
        await _until_online(online, set(workers))
        queue = Queue(tasks.QUEUE, app)
        planned = plan(total)
        started = time.monotonic()
        for k in range(0, len(planned), 500):
            await queue.add_bulk([call for _, _, call in planned[k : k + 500]])
        for kind, job_id, _ in planned:
            if kind.name == "cancelled":
                await queue.cancel(job_id)
        killed_active = await _watch(queue, len(planned), workers["demo-w1"], started)
        workers["demo-w2"].send_signal(signal.SIGTERM)
        await asyncio.wait_for(workers["demo-w2"].wait(), 30)
        return await _report(
            queue,
            planned,
            ledger,
            workers["demo-w1"].pid,
            killed_active,
            time.monotonic() - started,
        )
    finally:
        for proc in workers.values():
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        await online.aclose()
        await app.close()


async def _start_worker(wid: str, url: str, folder: Path) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "RELAYMQ_DEMO_LEDGER": str(folder / "ledger"),
        "RELAYMQ_STALLED_THRESHOLD": "2",
        "RELAYMQ_HEARTBEAT_INTERVAL": "0.5",
        "RELAYMQ_STALLED_CHECK_INTERVAL": "0.5",
        "RELAYMQ_SHUTDOWN_TIMEOUT": "5",
        "RELAYMQ_LOG_LEVEL": "ERROR",
    }
    log = folder / f"{wid}.log"
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relaymq",
        "worker",
        "relaymq.demo.tasks",
        "-q",
        tasks.QUEUE,
        "-c",
        "10",
        "--worker-id",
        wid,
        "--backend",
        url,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=log.open("wb"),
    )


async def _until_online(online: events.Subscription, ids: set[str]) -> None:
    """Await a worker:online event from each worker process."""
    seen: set[str] = set()
    async with asyncio.timeout(30):  # both worker processes started and registered
        async for event in online:
            if event.name == events.WORKER_ONLINE:
                seen.add(str(event.data.get("worker")))
            if ids <= seen:
                return


def _progress(counts: dict[JobState, int], total: int, note: str) -> Table:
    table = Table(title=f"jobs: {total}  {note}")
    for state in JobState:
        table.add_column(state.value, justify="right")
    table.add_row(*(str(counts[s]) for s in JobState))
    return table


async def _watch(
    queue: Queue, total: int, victim: asyncio.subprocess.Process, started: float
) -> set[str]:
    """Show live counts; SIGKILL the victim once KILL_AT of the jobs have ended."""
    killed_active: set[str] | None = None
    note = ""
    with Live(console=console, refresh_per_second=8) as live:
        while True:
            counts = await queue.counts()
            done = sum(counts[s] for s in TERMINAL)
            if killed_active is None and done >= total * KILL_AT:
                victim.send_signal(signal.SIGKILL)
                await victim.wait()
                killed_active = {
                    j.id for j in await _all(queue, JobState.ACTIVE) if j.worker_id == "demo-w1"
                }
                note = f"[red]demo-w1 SIGKILLed holding {len(killed_active)} jobs[/]"
            live.update(_progress(counts, total, note))
            if done == total:
                return killed_active or set()
            if time.monotonic() - started > DEADLINE:
                console.print(f"[red]gave up after {DEADLINE:.0f}s[/]")
                return killed_active or set()
            await asyncio.sleep(0.1)  # display refresh, not a wait for an outcome


async def _all(queue: Queue, state: JobState) -> list[Job]:
    out: list[Job] = []
    while page := await queue.list_jobs(state, offset=len(out), limit=500):
        out += page
    return out


def _read_ledger(ledger: Path, victim_pid: int) -> tuple[Counter[str], Counter[str]]:
    """Executions per job, in all processes and in the killed one."""
    executions: Counter[str] = Counter()
    by_victim: Counter[str] = Counter()
    for path in ledger.glob("*.log"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:  # a line cut short by the SIGKILL is not an execution
                executions[parts[0]] += 1
                if int(parts[2]) == victim_pid:
                    by_victim[parts[0]] += 1
    return executions, by_victim


async def _report(
    queue: Queue,
    planned: list[tuple[Kind, str, Call[int]]],
    ledger: Path,
    victim_pid: int,
    killed_active: set[str],
    elapsed: float,
) -> int:
    executions, by_victim = await asyncio.to_thread(_read_ledger, ledger, victim_pid)
    problems: list[str] = []
    table = Table(
        "kind",
        "jobs",
        "expected state",
        "ended so",
        "executions (expected)",
        title="relaymq demo: outcome",
    )
    duplicates = interrupted = recovered = as_expected = 0
    for kind in KINDS:
        ids = [job_id for k, job_id, _ in planned if k is kind]
        right = runs = 0
        for job_id in ids:
            job = await queue.get_job(job_id)
            if job is None or job.state not in TERMINAL:
                problems.append(f"{job_id}: lost or stuck ({job.state.value if job else 'gone'})")
                continue
            right += job.state is kind.state
            as_expected += job.state is kind.state
            if job.state is not kind.state:
                problems.append(f"{job_id}: {job.state.value}, expected {kind.state.value}")
            runs += executions[job_id]
            recovered += job.stalls > 0
            extra = executions[job_id] - kind.executions
            if extra == 0:
                continue
            # The kill explains one attempt of each job the dead worker held: either its side
            # effect happened and the attempt runs again (+1), or the kill came before the side
            # effect and the attempt counter moved on without it (-1).
            if job_id in killed_active and extra == 1 and by_victim[job_id] >= 1:
                duplicates += 1
            elif job_id in killed_active and extra == -1:
                interrupted += 1
            else:
                problems.append(
                    f"{job_id}: ran {executions[job_id]}x, expected "
                    f"{kind.executions}x, not explained by the kill"
                )
        table.add_row(
            kind.name,
            str(len(ids)),
            kind.state.value,
            f"{right}/{len(ids)}",
            f"{runs} ({kind.executions * len(ids)})",
        )
    console.print(table)
    if not killed_active:
        problems.append("the killed worker held no job: the demo proved nothing about recovery")
    if recovered < len(killed_active):
        problems.append(f"only {recovered} of {len(killed_active)} held jobs were recovered")
    lost = sum("lost or stuck" in p for p in problems)
    summary = Table("check", "result", title=f"finished in {elapsed:.1f}s")
    summary.add_row(
        "jobs that reached the expected terminal state", f"{as_expected}/{len(planned)}"
    )
    summary.add_row("lost or stuck jobs", str(lost))
    summary.add_row("jobs held by the SIGKILLed worker", str(len(killed_active)))
    summary.add_row("jobs recovered by stalled recovery", str(recovered))
    summary.add_row("duplicate executions, each explained by the kill", str(duplicates))
    summary.add_row("attempts cut short by the kill before their side effect", str(interrupted))
    summary.add_row("result", "[green]all checks passed[/]" if not problems else "[red]FAILED[/]")
    console.print(summary)
    for p in problems[:20]:
        console.print(f"[red]- {p}[/]")
    return 1 if problems else 0
