"""The chaos soak: worker processes run jobs that append to a ledger while the soak SIGKILLs
workers, freezes them (SIGSTOP, then SIGCONT after the stalled threshold) and crashes the
server (private instances, persistence on), with producers enqueueing throughout. Then the
checker reads every job back and classifies it against the ledger:

- **completed once**: its executions are exactly the ones its kind needs (a ``flaky`` job
  fails its first attempt on purpose);
- **duplicated, explained**: an extra execution started in a process that was killed or
  frozen while it ran, or while the server was being restarted;
- **duplicated, unexplained**, **lost** (acknowledged, then gone), **stuck** (not completed by
  the deadline), **stale write** (the result comes from an attempt that is not the job's
  last: a settle from a lost claim was accepted). Any of these fails the soak.

It also reports how long after a kill the killed worker's jobs were put back in line (from the
recovering worker's ``job:stalled`` events), against ``stalled_threshold``, and how long until
they ran again (their wait in line included).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import signal
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from relaymq import Queue, events
from relaymq.backends import connect
from relaymq.backends.base import Backend
from relaymq.errors import BackendError
from relaymq.instrumented import Instrumented
from relaymq.job import Job, JobState
from tests.soak import tasks

ROOT = Path(__file__).resolve().parents[2]
BATCH = 250


@dataclass(frozen=True)
class Profile:
    jobs: int
    workers: int
    kills: int
    freezes: int
    restarts: int
    deadline: float
    """Seconds the whole soak may take before unfinished jobs count as stuck."""


SHORT = Profile(jobs=600, workers=3, kills=3, freezes=1, restarts=1, deadline=120)
LONG = Profile(jobs=100_000, workers=4, kills=200, freezes=40, restarts=10, deadline=3600)


@dataclass
class Target:
    """A backend to soak: its URL and, for a server, how to crash and restart it."""

    name: str
    url: str
    stop: Callable[[], Awaitable[None]] | None = None
    """Crash the server (SIGKILL or an immediate shutdown: no clean checkpoint)."""
    start: Callable[[], Awaitable[None]] | None = None
    """Start it again on the same data."""
    stalled_threshold: float = 1.5
    """The workers' (heartbeats and recovery scale with it): longer for a slow server."""
    share: float = 1.0
    """The share of a profile's jobs this target runs (a slow test server runs fewer)."""
    worker_module: str = "tests.soak.worker"
    """What each worker process runs (``python -m``): the harness's own tests give one that
    cannot start."""

    async def restart(self) -> None:
        assert self.stop is not None and self.start is not None
        await self.stop()
        await self.start()


@dataclass
class Report:
    target: str
    jobs: int
    stalled_threshold: float
    seconds: float = 0.0
    completed_once: int = 0
    explained: int = 0
    unexplained: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    kills: int = 0
    freezes: int = 0
    restarts: int = 0
    worker_exits: list[str] = field(default_factory=list)
    """Workers that exited on their own (no kill of the chaos): each one fails the soak."""
    aborted: str = ""
    """Why the soak stopped before its jobs were done (no worker left), or empty."""
    waited: int = 0
    """Workers that started while the server was down and waited for it (their stderr says
    ``waiting for``) instead of exiting."""
    requeued: list[float] = field(default_factory=list)
    """Seconds from a kill to the recovery that put a job of the killed worker back in line
    (the ``job:stalled`` event's time; events a busy backend dropped have no sample)."""
    recovery: list[float] = field(default_factory=list)
    """Seconds from a kill to the job's next execution: its wait in line included."""

    @property
    def ok(self) -> bool:
        problems = (self.unexplained, self.lost, self.stuck, self.stale, self.worker_exits)
        return not (any(problems) or self.aborted)

    def summary(self) -> str:
        return (
            f"{self.target}: {self.jobs} jobs in {self.seconds:.1f}s; completed once "
            f"{self.completed_once}, duplicated with a crash that explains it {self.explained}, "
            f"unexplained {len(self.unexplained)}, lost {len(self.lost)}, stuck "
            f"{len(self.stuck)}, stale writes {len(self.stale)}; {self.kills} kills, "
            f"{self.freezes} freezes, {self.restarts} server restarts, "
            f"{len(self.worker_exits)} worker exits ({self.waited} workers waited for the "
            f"server at start); after a kill "
            f"(stalled_threshold {self.stalled_threshold}s), back in line "
            f"{_percentiles(self.requeued)}, running again {_percentiles(self.recovery)}"
        )


def _percentiles(seconds: list[float]) -> str:
    if not seconds:
        return "(no samples)"
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered):.2f}s p99 {p99:.2f}s ({len(ordered)} jobs)"


@dataclass
class Chaos:
    """What the soak did to whom, and when (monotonic clock)."""

    killed: dict[int, float] = field(default_factory=dict)
    frozen: dict[int, tuple[float, float]] = field(default_factory=dict)
    """Each worker frozen once at most, from SIGSTOP to SIGCONT."""
    stopped: set[int] = field(default_factory=set)
    """Workers frozen now or before."""
    restarts: list[tuple[float, float]] = field(default_factory=list)


@dataclass(frozen=True)
class Exit:
    """A worker process that ended on its own (no kill of the soak's): how, and its last
    words."""

    pid: int
    code: int | None
    stderr: str
    """The last ``TAIL`` lines of its stderr file."""
    path: Path

    def describe(self) -> str:
        lines = self.stderr.rstrip("\n").splitlines() or ["(nothing on stderr)"]
        return (
            f"worker pid {self.pid} exited with code {self.code} ({self.path}); last "
            "lines of its stderr:\n" + "\n".join(f"    {line}" for line in lines)
        )


TAIL = 20
"""Lines of a worker's stderr an unexpected exit reports."""

MAX_REPLACED = 20
"""Unexpected exits replaced by a fresh worker; past that (a worker that cannot start at all)
none is started, and the soak ends once no worker is left."""


class Workers:
    """The soak's worker processes, each with its stderr in a file of its own in ``folder``.
    A worker that exits on its own (not killed by the chaos, not stopped) is recorded in
    ``exits`` and replaced, so the soak keeps its worker count."""

    def __init__(self, target: Target, queue: str, ledger: Path, folder: Path) -> None:
        self.target, self.queue, self.ledger, self.folder = target, queue, ledger, folder
        self.procs: list[asyncio.subprocess.Process] = []
        self.paths: dict[int, Path] = {}
        self.exits: list[Exit] = []
        self.killed: set[int] = set()
        """Processes the soak killed or stopped: their exits are expected."""
        self.started = asyncio.Event()
        """Set at every start (``wait_live`` waits on it)."""
        self._watches: list[asyncio.Task[None]] = []
        self._stopping = False
        folder.mkdir(parents=True, exist_ok=True)

    async def start(self) -> asyncio.subprocess.Process:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "RELAYMQ_SOAK_LEDGER": str(self.ledger),
            "RELAYMQ_LOG_LEVEL": "WARNING",
        }
        path = self.folder / f"worker-{len(self.procs):04d}.stderr"
        with path.open("wb") as stderr:  # the child holds its own copy of the descriptor
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                self.target.worker_module,
                self.target.url,
                self.queue,
                str(self.target.stalled_threshold),
                cwd=ROOT,
                env=env,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=stderr,
            )
        self.procs.append(proc)
        self.paths[proc.pid] = path
        self._watches.append(asyncio.create_task(self._watch(proc)))
        self.started.set()
        return proc

    def kill(self, proc: asyncio.subprocess.Process) -> None:
        """SIGKILL ``proc``: an exit the chaos causes."""
        self.killed.add(proc.pid)
        proc.kill()

    async def _watch(self, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        if self._stopping or proc.pid in self.killed:
            return
        path = self.paths[proc.pid]
        tail = "\n".join(path.read_text(errors="replace").splitlines()[-TAIL:])
        gone = Exit(proc.pid, code, tail, path)
        self.exits.append(gone)
        print(f"soak: {gone.describe()}", file=sys.stderr, flush=True)
        if len(self.exits) <= MAX_REPLACED:
            await self.start()

    def live(self) -> list[asyncio.subprocess.Process]:
        return [p for p in self.procs if p.returncode is None]

    def waited(self) -> int:
        """How many workers logged that they waited for the server at start."""
        texts = [path.read_text(errors="replace") for path in self.paths.values()]
        return sum("waiting for" in text for text in texts)

    async def wait_live(self, within: float) -> list[asyncio.subprocess.Process]:
        """The live workers, once there is one (a replacement may be starting); an empty list
        when none came within ``within`` seconds."""
        try:
            async with asyncio.timeout(within):
                while not self.live():
                    self.started.clear()
                    await self.started.wait()
        except TimeoutError:
            return []
        return self.live()

    async def stop(self) -> None:
        self._stopping = True
        for p in self.live():
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                await asyncio.wait_for(p.wait(), 20)
            except TimeoutError:
                p.kill()
                await p.wait()
        for w in self._watches:
            w.cancel()
        await asyncio.gather(*self._watches, return_exceptions=True)


class NoWorkerLeft(Exception):
    """No worker process was alive for longer than the soak allows."""


async def soak(target: Target, profile: Profile, tmp: Path, seed: int | None = None) -> Report:
    rng = random.Random(seed)
    profile = dataclasses.replace(profile, jobs=max(1, round(profile.jobs * target.share)))
    ledger = tmp / "ledger"
    ledger.mkdir(parents=True, exist_ok=True)
    queue_name = f"soak-{rng.getrandbits(32):08x}"
    kinds = {f"j{i:06d}": ("flaky" if i % 10 == 0 else "ok") for i in range(profile.jobs)}
    backend = await connect(target.url)
    queue = Queue(queue_name, backend)
    workers = Workers(target, queue_name, ledger, tmp / "workers")
    chaos = Chaos()
    began = time.monotonic()
    report = Report(target.name, profile.jobs, target.stalled_threshold)
    stalls: dict[str, list[float]] = defaultdict(list)
    listening = asyncio.create_task(_stalls(backend, queue_name, stalls))
    try:
        for _ in range(profile.workers):
            await workers.start()
        producing = asyncio.create_task(_produce(queue, kinds))
        try:
            await _run_chaos(target, profile, queue, workers, chaos, rng, began)
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
    jobs = await _read_all(queue, list(kinds))
    await backend.close()
    _check(report, kinds, jobs, _read_ledger(ledger), chaos, stalls)
    report.worker_exits = [e.describe() for e in workers.exits]
    report.waited = workers.waited()
    report.kills, report.freezes = len(chaos.killed), len(chaos.frozen)
    report.restarts = len(chaos.restarts)
    return report


async def _retrying(call: Callable[[], Awaitable[object]], what: str, within: float) -> object:
    """A backend call tried again while the server restarts."""
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


async def _produce(queue: Queue, kinds: dict[str, str]) -> None:
    """Enqueue every job in batches while the chaos runs (fixed ids: a retried batch is
    answered as duplicates, never stored twice)."""
    ids = list(kinds)
    for at in range(0, len(ids), BATCH):
        calls = [tasks.step.with_options(job_id=i).call(kinds[i]) for i in ids[at : at + BATCH]]
        await _retrying(lambda calls=calls: queue.add_bulk(calls), "enqueue", 60)
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
) -> None:
    """Do each disruption when its share of the jobs has completed; return when all have."""
    plan = [("kill", rng.uniform(0.05, 0.9)) for _ in range(profile.kills)]
    plan += [("freeze", rng.uniform(0.05, 0.9)) for _ in range(profile.freezes)]
    if target.stop is not None:
        plan += [("restart", (i + 1) / (profile.restarts + 1)) for i in range(profile.restarts)]
    plan.sort(key=lambda p: p[1])
    thaws: list[asyncio.Task[None]] = []
    patience = NO_WORKER_THRESHOLDS * target.stalled_threshold
    alone_since: float | None = None
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
                thaws.append(asyncio.create_task(_thaw(victim, chaos, target.stalled_threshold)))
            elif target.stop is not None:
                start = time.monotonic()
                await target.restart()
                chaos.restarts.append((start, time.monotonic()))
        if done >= profile.jobs:
            break
        await asyncio.sleep(0.05)  # a pause between two looks at the counts
    for t in thaws:
        await t


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


async def _read_all(queue: Queue, ids: list[str]) -> dict[str, Job | None]:
    out: dict[str, Job | None] = {}
    for at in range(0, len(ids), 500):
        chunk = ids[at : at + 500]
        found = await _retrying(lambda chunk=chunk: queue.get_jobs(chunk), "read", 60)
        out.update(zip(chunk, found, strict=True))  # type: ignore[call-overload]
    return out


@dataclass(frozen=True)
class Run:
    attempt: int
    pid: int
    at: float
    """Wall-clock start."""


def _read_ledger(ledger: Path) -> dict[str, list[Run]]:
    runs: dict[str, list[Run]] = defaultdict(list)
    for path in ledger.glob("*.log"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4:  # a line cut by a SIGKILL mid-write is not a run
                runs[parts[0]].append(Run(int(parts[1]), int(parts[2]), float(parts[3])))
    for r in runs.values():
        r.sort(key=lambda run: run.at)
    return runs


def _check(
    report: Report,
    kinds: dict[str, str],
    jobs: dict[str, Job | None],
    ledger: dict[str, list[Run]],
    chaos: Chaos,
    stalls: dict[str, list[float]],
) -> None:
    # The chaos times are monotonic, the ledger's wall-clock: line them up.
    offset = time.time() - time.monotonic()
    killed = {pid: at + offset for pid, at in chaos.killed.items()}
    frozen = {pid: (a + offset, b + offset) for pid, (a, b) in chaos.frozen.items()}
    restarts = [(a + offset, b + offset) for a, b in chaos.restarts]
    for job_id, kind in kinds.items():
        job = jobs.get(job_id)
        runs = ledger.get(job_id, [])
        if job is None:
            report.lost.append(job_id)
            continue
        if job.state is not JobState.COMPLETED:
            report.stuck.append(f"{job_id} {job.state.value} after {len(runs)} runs")
            continue
        result = job.result_value()
        if not runs or result[0] != job.attempts:
            report.stale.append(f"{job_id}: result of attempt {result[0]}, job at {job.attempts}")
            continue
        # Every run but the one that completed the job (its attempt is the job's last) and a
        # flaky job's designed first failure needs a disruption to explain it.
        expected = {job.attempts, 1} if kind == "flaky" else {job.attempts}  # flaky: 1 fails
        extra = [r for r in runs if r.attempt not in expected]
        if not extra:
            report.completed_once += 1
            continue
        stalled = report.stalled_threshold
        unexplained = [
            r for r in extra if not _explained(r, runs, killed, frozen, restarts, stalled)
        ]
        if unexplained:
            report.unexplained.append(f"{job_id}: {runs}")
        else:
            report.explained += 1
        for r in extra:
            if r.pid in killed:
                later = [n.at for n in runs if n.at > killed[r.pid]]
                if later:
                    report.recovery.append(min(later) - killed[r.pid])
                requeued = [at for at in stalls.get(job_id, []) if at > killed[r.pid]]
                if requeued:
                    report.requeued.append(min(requeued) - killed[r.pid])


def _explained(
    run: Run,
    runs: list[Run],
    killed: dict[int, float],
    frozen: dict[int, tuple[float, float]],
    restarts: list[tuple[float, float]],
    stalled: float,
) -> bool:
    """An execution that did not end the job is explained by its process being killed or
    frozen after it started, or by a server restart before the next execution started."""
    after = [r.at for r in runs if r.at > run.at]
    until = min(after) if after else float("inf")
    if run.pid in killed and killed[run.pid] >= run.at - 1:
        return True
    if run.pid in frozen and frozen[run.pid][1] >= run.at - 1:
        return True
    return any(start <= until and end + stalled * 4 >= run.at for start, end in restarts)
