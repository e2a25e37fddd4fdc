"""The chaos soak: worker processes run jobs that append to a ledger while the soak SIGKILLs
workers, freezes them (SIGSTOP, then SIGCONT after the stalled threshold), crashes the server
(private instances, persistence on) and, on a target whose workers run on test hosts
(tests/hosts), cuts them off the network, slows their links and heals them, with producers
enqueueing throughout. Then the checker (checker.py) reads every job back and classifies it
against the ledger and the workers' journals.

Its report also says how long after a kill the killed worker's jobs were put back in line
(from the recovering worker's ``job:stalled`` events), against ``stalled_threshold``, and how
long until they ran again (their wait in line included); after a network fault, how long until
a cut-off worker's jobs ran elsewhere, and until the healed workers were back at work.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import random
import signal
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path

from relaymq import Queue, events
from relaymq.backends import connect
from relaymq.backends.base import Backend
from relaymq.errors import BackendError
from relaymq.instrumented import Instrumented
from relaymq.job import Job, JobState
from tests.soak import journal, tasks
from tests.soak.checker import Facts, Report, check, read_ledger
from tests.soak.plan import LONG, SHORT, Chaos, Profile, Target
from tests.soak.workers import Workers

__all__ = [
    "LONG",
    "NO_WORKER_THRESHOLDS",
    "SHORT",
    "Profile",
    "Report",
    "Target",
    "Workers",
    "soak",
]

BATCH = 250


class NoWorkerLeft(Exception):
    """No worker process was alive for longer than the soak allows."""


async def soak(target: Target, profile: Profile, tmp: Path, seed: int | None = None) -> Report:
    rng = random.Random(seed)
    profile = dataclasses.replace(profile, jobs=max(1, round(profile.jobs * target.share)))
    ledger = tmp / "ledger"
    ledger.mkdir(parents=True, exist_ok=True)
    queue_name = f"soak-{rng.getrandbits(32):08x}"
    kinds: dict[str, str] = {}
    """Each enqueued job's kind, filled in by the producer."""
    backend = await connect(target.url)
    queue = Queue(queue_name, backend)
    workers = Workers(target, queue_name, ledger, tmp / "workers", profile.work)
    chaos = Chaos()
    began = time.monotonic()
    report = Report(target.name, profile.jobs, target.stalled_threshold, target.heartbeat_p99)
    stalls: dict[str, list[float]] = defaultdict(list)
    listening = asyncio.create_task(_stalls(backend, queue_name, stalls))
    try:
        for _ in range(profile.workers):
            await workers.start()
        calm = asyncio.Event()
        producing = asyncio.create_task(_produce(queue, kinds, profile, calm))

        def finished(done: int) -> bool:
            return producing.done() and done >= len(kinds)

        try:
            await _run_chaos(target, profile, queue, workers, chaos, rng, began, finished, calm)
        except NoWorkerLeft as e:
            report.aborted = str(e)
            producing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await producing
        report.seconds = time.monotonic() - began
    finally:
        await workers.stop()
        listening.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listening
    jobs = await read_all(queue, list(kinds))
    report.jobs = len(kinds)
    await backend.close()
    lines = [
        f"{p.kind} {' '.join(map(str, p.hosts))} {p.start:.4f} {p.end:.4f}\n"
        for p in chaos.partitions
    ]
    (tmp / "partitions").write_text(
        "".join(lines) + "".join(f"host {pid} {h}\n" for pid, h in workers.host_of.items())
    )
    journals = journal.read(ledger)
    stalled, bound = target.stalled_threshold, target.reconnect
    facts = Facts.of(chaos, workers.host_of, journals, stalls, stalled, bound)
    check(report, kinds, jobs, read_ledger(ledger), chaos, facts)
    report.worker_exits = [e.describe() for e in workers.exits]
    report.waited = workers.waited()
    report.kills, report.freezes = len(chaos.killed), len(chaos.frozen)
    report.restarts = len(chaos.restarts)
    return report


def _keep_faults(path: Path, chaos: Chaos, host_of: dict[int, int]) -> None:
    """The network faults and each worker's host, kept beside the ledger for a later look."""
    lines = [
        f"{p.kind} {' '.join(map(str, p.hosts))} {p.start:.4f} {p.end:.4f}"
        for p in chaos.partitions
    ]
    lines += [f"host {pid} {host}" for pid, host in host_of.items()]
    path.write_text("".join(f"{line}\n" for line in lines))


async def retrying(call: Callable[[], Awaitable[object]], within: float) -> object:
    """A backend call tried again while the server restarts (or the topology fails over)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await call()
        except BackendError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)  # the server is restarting: a pause between attempts


async def _stalls(backend: Backend, queue: str, stalls: dict[str, list[float]]) -> None:
    """The time of every ``job:stalled`` event (a recovery) of ``queue``, subscribing again
    after a server restart."""
    while True:
        try:
            subscription = await Instrumented(backend).subscribe()
            try:
                async for event in subscription:
                    if event.name == events.JOB_STALLED and event.queue == queue and event.job_id:
                        stalls[event.job_id].append(event.at)
            finally:
                await subscription.aclose()
        except BackendError:
            await asyncio.sleep(0.2)  # the server is restarting: a pause before subscribing


async def _produce(
    queue: Queue, kinds: dict[str, str], profile: Profile, calm: asyncio.Event
) -> None:
    """Enqueue the profile's jobs in batches while the chaos runs (fixed ids: a retried batch
    is answered as duplicates, never stored twice), and more while network faults are still to
    come (``calm`` not set); with a ``backlog``, only as fast as the workers complete them."""
    made = 0
    while made < profile.jobs or not calm.is_set():
        size = BATCH if made >= profile.jobs else min(BATCH, profile.jobs - made)
        if profile.backlog:
            size = min(size, max(1, profile.backlog // 4))
            while made - await _completed(queue) > profile.backlog - size:
                if made >= profile.jobs and calm.is_set():
                    return
                await asyncio.sleep(0.05)  # a pause between two looks at the counts
        ids = [f"j{i:06d}" for i in range(made, made + size)]
        kinds.update((i, "flaky" if int(i[1:]) % 10 == 0 else "ok") for i in ids)
        calls = [tasks.step.with_options(job_id=i).call(kinds[i]) for i in ids]
        await retrying(lambda calls=calls: queue.add_bulk(calls), 60)
        made += size
        await asyncio.sleep(0)


async def _completed(queue: Queue) -> int:
    try:
        return (await queue.counts()).get(JobState.COMPLETED, 0)
    except BackendError:
        return -1  # the server is restarting


async def _run_chaos(
    target: Target,
    profile: Profile,
    queue: Queue,
    workers: Workers,
    chaos: Chaos,
    rng: random.Random,
    began: float,
    finished: Callable[[int], bool],
    calm: asyncio.Event,
) -> None:
    """Do each disruption when its share of the jobs has completed (network faults one after
    the other, setting ``calm`` once done); return when every job enqueued has completed."""
    plan = [("kill", rng.uniform(0.05, 0.9)) for _ in range(profile.kills)]
    plan += [("freeze", rng.uniform(0.05, 0.9)) for _ in range(profile.freezes)]
    if target.stop is not None:
        plan += [("restart", (i + 1) / (profile.restarts + 1)) for i in range(profile.restarts)]
    plan.sort(key=lambda p: p[1])
    thaws: list[asyncio.Task[None]] = []
    patience = NO_WORKER_THRESHOLDS * target.stalled_threshold
    alone_since: float | None = None
    faults = asyncio.create_task(_partitions(target, profile, queue, chaos, rng, calm))
    try:
        while True:
            done = await _completed(queue)
            if time.monotonic() - began > profile.deadline:
                break
            if workers.live():
                alone_since = None
            elif alone_since is None:
                alone_since = time.monotonic()
            elif time.monotonic() - alone_since > patience:
                raise NoWorkerLeft(_no_worker(workers, patience))
            # Every disruption whose share is reached goes first, before the check for the end: a
            # fast backend can finish the rest of the jobs during a server restart, and the plan's
            # later kills and freezes must still happen (to the workers left, idle or not).
            while plan and done >= 0 and done >= plan[0][1] * profile.jobs:
                action, _ = plan.pop(0)
                if action == "kill":
                    live = await workers.wait_live(patience)
                    if not live:
                        raise NoWorkerLeft(_no_worker(workers, patience))
                    victim = rng.choice(live)
                    workers.kill(victim)
                    chaos.killed[victim.pid] = time.monotonic()
                    await victim.wait()  # reaped: the next kill cannot pick it again
                    await workers.start()
                elif action == "freeze":
                    live = await workers.wait_live(patience)
                    fresh = [p for p in live if p.pid not in chaos.stopped]
                    if not fresh:  # every live worker was frozen once (or none is left): one more
                        fresh = [await workers.start()]
                    victim = rng.choice(fresh)
                    chaos.stopped.add(victim.pid)
                    victim.send_signal(signal.SIGSTOP)
                    thaws.append(
                        asyncio.create_task(_thaw(victim, chaos, target.stalled_threshold))
                    )
                elif target.stop is not None:
                    start = time.monotonic()
                    await target.restart()
                    chaos.restarts.append((start, time.monotonic()))
            if finished(done) and faults.done():
                break
            await asyncio.sleep(0.05)  # a pause between two looks at the counts
    finally:
        faults.cancel()  # at the deadline: every link is healed on the way out
        with contextlib.suppress(asyncio.CancelledError):
            await faults
    for t in thaws:
        await t


async def _partitions(
    target: Target,
    profile: Profile,
    queue: Queue,
    chaos: Chaos,
    rng: random.Random,
    calm: asyncio.Event,
) -> None:
    """The profile's network faults, one after the other from the first completed job on,
    each followed by the profile's ``calm`` (or half a stalled threshold; the last by two
    thresholds more, so that the check sees the healed workers at work); then ``calm`` is
    set. With ``repeat``, over and over until the profile's jobs have completed."""
    try:
        if not profile.partitions:
            return
        from tests.hosts.faults import Lengths, partition

        if target.network is None:
            raise ValueError(f"{target.name}: partitions need a target on test hosts")
        stalled = target.stalled_threshold
        lengths = Lengths.of(stalled, profile.cut, profile.lossy, profile.flaps)
        while True:  # from the first completed job on: handlers are running
            if await _completed(queue) >= 1:
                break
            await asyncio.sleep(0.05)  # a pause between two looks at the counts
        kinds = itertools.cycle(profile.partitions) if profile.repeat else profile.partitions
        for kind in kinds:
            if profile.repeat and await _completed(queue) >= profile.jobs:
                break
            chaos.partitions.append(await partition(kind, target.network, rng, stalled, lengths))
            await asyncio.sleep(profile.calm or stalled / 2)  # calm between two faults
        await asyncio.sleep(2 * stalled)  # calm: the healed workers back at work
    finally:
        calm.set()


NO_WORKER_THRESHOLDS = 5
"""Stalled thresholds the soak goes on without a live worker process before it fails."""


def _no_worker(workers: Workers, patience: float) -> str:
    exits = "\n".join(e.describe() for e in workers.exits[-3:]) or "(no unexpected exits)"
    return (
        f"no live worker for {patience:.1f}s ({len(workers.procs)} started, "
        f"{len(workers.exits)} exited on their own); the last exits:\n{exits}"
    )


async def _thaw(victim: asyncio.subprocess.Process, chaos: Chaos, stalled: float) -> None:
    frozen_at = time.monotonic()
    await asyncio.sleep(stalled * 2)  # long enough to be recovered
    with contextlib.suppress(ProcessLookupError):
        victim.send_signal(signal.SIGCONT)
    chaos.frozen[victim.pid] = (frozen_at, time.monotonic())


async def read_all(queue: Queue, ids: list[str]) -> dict[str, Job | None]:
    out: dict[str, Job | None] = {}
    for at in range(0, len(ids), 500):
        chunk = ids[at : at + 500]
        found = await retrying(lambda chunk=chunk: queue.get_jobs(chunk), 60)
        out.update(zip(chunk, found, strict=True))  # type: ignore[call-overload]
    return out
