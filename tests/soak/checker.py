"""The soak's checker: every job read back and classified against the ledger (what each handler
run did) and the workers' journals (tests/soak/journal.py: heartbeats with their latency,
claims lost, settles refused, recoveries):

- **completed once**: its executions are exactly the ones its kind needs (a ``flaky`` job
  fails its first attempt on purpose);
- **duplicated, explained**, by cause: an extra execution started in a process that was killed
  or frozen while it ran, or while the server was being restarted, or on a test host that a
  network fault cut off (or slowed) while it ran; or, shown as ``latency``, by the worker's
  own heartbeat taking longer than the stalled threshold allows (the server was too slow);
- **duplicated, unexplained**, **lost** (acknowledged, then gone), **stuck** (not completed by
  the deadline), **stale write** (the result comes from an attempt that is not the job's
  last: a settle from a lost claim was accepted). Any of these fails the soak.

After each network fault it also checks that the workers of the hosts it hit were back at work
on their own (a heartbeat or a run after the heal) within the target's reconnect bound, and that
a worker whose run was taken over learnt it (a heartbeat said the claim was lost, or its settle
was refused).
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from relaymq.job import Job, JobState
from tests.hosts.faults import Partition
from tests.soak.journal import Entry
from tests.soak.plan import Chaos


@dataclass
class Report:
    target: str
    jobs: int
    stalled_threshold: float
    heartbeat_p99: float = 0.0
    """The heartbeat latency measured before the soak that the threshold follows, or 0."""
    seconds: float = 0.0
    completed_once: int = 0
    explained: int = 0
    causes: Counter[str] = field(default_factory=Counter)
    """Explained duplicates by cause (the first that applies, in the order of ``CAUSES``)."""
    unexplained: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    kills: int = 0
    freezes: int = 0
    restarts: int = 0
    partitions: Counter[str] = field(default_factory=Counter)
    """Network faults done, by kind."""
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
    elsewhere: list[float] = field(default_factory=list)
    """Seconds from a cut of one host (cut, flap) to the next run of a job that its worker was
    running: its wait in line included."""
    reconnected: list[float] = field(default_factory=list)
    """Seconds from a heal to the first sign that a worker of a healed host is at work."""
    not_resumed: list[str] = field(default_factory=list)
    """Workers of a healed host not back at work within the reconnect bound while work was
    left: each one fails the soak."""
    told: Counter[str] = field(default_factory=Counter)
    """How cut-off workers learnt a run of theirs was taken over (``lost``: a heartbeat;
    ``refused``: the settle)."""
    unaware: list[str] = field(default_factory=list)
    """Taken-over runs on a live cut-off worker that never learnt it: each fails the soak."""
    beats: list[float] = field(default_factory=list)
    """Every heartbeat's round trip, as the workers measured it."""
    rss: tuple[int, int, int, int] = (0, 0, 0, 0)
    """The busiest worker's RSS (KiB) at its first reading, after a tenth of its runs and at
    its last reading, and its runs by then."""

    @property
    def ok(self) -> bool:
        problems = (self.unexplained, self.lost, self.stuck, self.stale, self.worker_exits)
        problems += (self.not_resumed, self.unaware)
        return not (any(problems) or self.aborted)

    def summary(self) -> str:
        causes = ", ".join(f"{c} {n}" for c, n in sorted(self.causes.items())) or "none"
        text = (
            f"{self.target}: {self.jobs} jobs in {self.seconds:.1f}s; completed once "
            f"{self.completed_once}, duplicated and explained {self.explained} ({causes}), "
            f"unexplained {len(self.unexplained)}, lost {len(self.lost)}, stuck "
            f"{len(self.stuck)}, stale writes {len(self.stale)}; {self.kills} kills, "
            f"{self.freezes} freezes, {self.restarts} server restarts, "
            f"{len(self.worker_exits)} worker exits ({self.waited} workers waited for the "
            f"server at start); after a kill "
            f"(stalled_threshold {self.stalled_threshold}s{self._followed}), back in line "
            f"{percentiles(self.requeued)}, running again {percentiles(self.recovery)}; "
            f"heartbeats {percentiles(self.beats, 'beats')}; busiest worker's RSS "
            f"{self.rss[0] / 1024:.1f} MiB at start, {self.rss[1] / 1024:.1f} after a tenth of "
            f"its runs, {self.rss[2] / 1024:.1f} after {self.rss[3]} runs "
            f"({self.rss_growth:+.1f} % since that tenth)"
        )
        if self.partitions:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.partitions.items()))
            told = ", ".join(f"{k} {n}" for k, n in sorted(self.told.items())) or "none"
            text += (
                f"; partitions: {kinds}; a cut-off worker's jobs running elsewhere "
                f"{percentiles(self.elsewhere)}, back at work after the heal "
                f"{percentiles(self.reconnected, 'workers')}, not back "
                f"{len(self.not_resumed)}; taken-over runs learnt by ({told}), never "
                f"{len(self.unaware)}"
            )
        return text

    @property
    def rss_growth(self) -> float:
        """The busiest worker's RSS growth from a tenth of its runs to its last reading, in
        percent (``benchmarks/memory.py``'s measure; the issue's target: <= 5 %)."""
        _, warm, last, _ = self.rss
        return (last - warm) / warm * 100 if warm else 0.0

    @property
    def _followed(self) -> str:
        if not self.heartbeat_p99:
            return ""
        return f", following a heartbeat p99 of {self.heartbeat_p99:.2f}s measured before"

    def problems(self, each: int = 5) -> list[str]:
        found = self.unexplained[:each] + self.lost[:each] + self.stuck[:each]
        found += self.stale[:each] + self.not_resumed[:each] + self.unaware[:each]
        return found + self.worker_exits[:each]


def percentiles(seconds: list[float], what: str = "jobs") -> str:
    if not seconds:
        return "(no samples)"
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered):.2f}s p99 {p99:.2f}s ({len(ordered)} {what})"


@dataclass(frozen=True)
class Run:
    attempt: int
    pid: int
    at: float
    """Wall-clock start."""


def read_ledger(ledger: Path) -> dict[str, list[Run]]:
    runs: dict[str, list[Run]] = defaultdict(list)
    for path in ledger.glob("*.log"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4:  # a line cut by a SIGKILL mid-write is not a run
                runs[parts[0]].append(Run(int(parts[1]), int(parts[2]), float(parts[3])))
    for r in runs.values():
        r.sort(key=lambda run: run.at)
    return runs


CUTS = ("cut", "server", "flap")
"""The faults that cut workers off (a blip is shorter than the threshold, a lossy link slow)."""


@dataclass
class Facts:
    """What the soak did and saw, on the ledger's wall clock."""

    killed: dict[int, float]
    frozen: dict[int, tuple[float, float]]
    restarts: list[tuple[float, float]]
    host_of: dict[int, int]
    """The test host of each worker process (none without test hosts)."""
    journals: dict[int, list[Entry]]
    stalls: dict[str, list[float]]
    """The times of each job's ``job:stalled`` events."""
    stalled: float
    reconnect: float

    @classmethod
    def of(
        cls,
        chaos: Chaos,
        host_of: dict[int, int],
        journals: dict[int, list[Entry]],
        stalls: dict[str, list[float]],
        stalled: float,
        reconnect: float,
    ) -> Facts:
        offset = time.time() - time.monotonic()  # the chaos times are monotonic
        return cls(
            {pid: at + offset for pid, at in chaos.killed.items()},
            {pid: (a + offset, b + offset) for pid, (a, b) in chaos.frozen.items()},
            [(a + offset, b + offset) for a, b in chaos.restarts],
            host_of,
            journals,
            stalls,
            stalled,
            reconnect,
        )

    def cause(self, run: Run, until: float, chaos: Chaos) -> str | None:
        """What explains ``run``, an execution that did not end its job (the next one started
        at ``until``), or None."""
        if run.pid in self.killed and self.killed[run.pid] >= run.at - 1:
            return "kill"
        if run.pid in self.frozen and self.frozen[run.pid][1] >= run.at - 1:
            return "freeze"
        slack = self.stalled * 4
        if any(start <= until and end + slack >= run.at for start, end in self.restarts):
            return "restart"
        p = self.partition_of(run, until, chaos)
        if p is not None:
            return f"partition ({p.kind})"
        if self.slow_beat(run.pid, run.at, until) is not None:
            return "latency"
        return None

    def partition_of(self, run: Run, until: float, chaos: Chaos) -> Partition | None:
        """The network fault that ended ``run`` (the next run started at ``until``): the first
        on its host under way while the run held its claim, passing over one too short to let
        the claim go stale when a later one fits too (a claim lost in one fault is not lost
        again in the next: a worker recovering its own stale job after a cut of the server,
        as the next fault began, was once put down to that fault)."""
        host = self.host_of.get(run.pid)
        fits = [
            p
            for p in chaos.partitions  # in the order they were made
            if host in p.hosts and p.start <= until and p.end + self.stalled >= run.at
        ]
        for p in fits[:-1]:
            if p.end - p.start >= self.stalled:
                return p
        return fits[-1] if fits else None

    def slow_beat(self, pid: int, since: float, until: float) -> float | None:
        """The longest time ``pid``'s claims went unrenewed between ``since`` and ``until``
        (from one heartbeat that landed to the next: failed and unanswered ones renew
        nothing) when it took the threshold less one heartbeat interval or more, or None."""
        allowed = self.stalled * (1 - 1 / 7.5)
        landed = [
            e.at
            for e in self.journals.get(pid, [])
            if e.kind == "beat" and e.ok and since <= e.at <= until
        ]
        points = [since, *landed, until] if until != float("inf") else [since, *landed]
        gap = max((b - a for a, b in itertools.pairwise(points)), default=0.0)
        return gap if gap >= allowed else None

    def evidence(self, pid: int, job_id: str, since: float, until: float) -> str:
        """What ``pid``'s journal says between ``since`` and ``until`` (for an unexplained
        duplicate): its heartbeats and whether it learnt the claim was lost."""
        entries = [e for e in self.journals.get(pid, []) if since - 1 <= e.at <= until + 10]
        beats = [e for e in entries if e.kind == "beat"]
        failed = sum(1 for e in beats if not e.ok)
        longest = max((e.seconds for e in beats), default=0.0)
        learnt = [f"{e.kind} at +{e.at - since:.2f}s" for e in entries if e.job == job_id]
        return (
            f"pid {pid}: {len(beats)} heartbeats ({failed} failed, longest {longest:.2f}s), "
            f"{', '.join(learnt) or 'no claim-lost or refused entry'}"
        )


def check(
    report: Report,
    kinds: dict[str, str],
    jobs: dict[str, Job | None],
    ledger: dict[str, list[Run]],
    chaos: Chaos,
    facts: Facts,
) -> None:
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
        causes = []
        for r in extra:
            until = min((n.at for n in runs if n.at > r.at), default=float("inf"))
            cause = facts.cause(r, until, chaos)
            if cause is None:
                report.unexplained.append(
                    f"{job_id}: {runs}; {facts.evidence(r.pid, job_id, r.at, until)}"
                )
                break
            causes.append(cause)
        else:
            report.explained += 1
            report.causes[causes[0]] += 1
        for r in extra:
            if r.pid in facts.killed:
                killed = facts.killed[r.pid]
                later = [n.at for n in runs if n.at > killed]
                if later:
                    report.recovery.append(min(later) - killed)
                requeued = [at for at in facts.stalls.get(job_id, []) if at > killed]
                if requeued:
                    report.requeued.append(min(requeued) - killed)
    for p in chaos.partitions:
        report.partitions[p.kind] += 1
        _resumed(report, ledger, p, facts, chaos.partitions)
        if p.kind in CUTS:
            _taken_over(report, kinds, ledger, chaos, p, facts)
    report.beats = [e.seconds for j in facts.journals.values() for e in j if e.kind == "beat"]
    report.rss = _rss(facts.journals)


def _rss(journals: dict[int, list[Entry]]) -> tuple[int, int, int, int]:
    readings = {
        pid: [tuple(map(int, e.detail.split())) for e in entries if e.kind == "rss"]
        for pid, entries in journals.items()
    }
    busiest = max(readings.values(), key=lambda r: r[-1][1] if r else 0, default=[])
    if not busiest:
        return (0, 0, 0, 0)
    warm = next((kib for kib, runs in busiest if runs >= busiest[-1][1] / 10), busiest[0][0])
    return (busiest[0][0], warm, busiest[-1][0], busiest[-1][1])


def _resumed(
    report: Report,
    ledger: dict[str, list[Run]],
    p: Partition,
    facts: Facts,
    partitions: Sequence[Partition],
) -> None:
    """Each worker of the hosts ``p`` hit, alive before it and not killed soon after, is at
    work again within the reconnect bound of the heal, unless no work was left for it or
    another of ``partitions`` hit its host again within that bound (that one's heal is the
    one it is held to)."""
    runs_of: dict[int, list[float]] = defaultdict(list)
    for job_runs in ledger.values():
        for r in job_runs:
            runs_of[r.pid].append(r.at)
    last_run = max((at for ats in runs_of.values() for at in ats), default=0.0)
    for pid, host in facts.host_of.items():
        if host not in p.hosts:
            continue
        seen = [e.at for e in facts.journals.get(pid, [])] + runs_of.get(pid, [])
        if not any(at < p.start for at in seen):
            continue  # started after the fault began
        if pid in facts.killed and facts.killed[pid] < p.end + facts.reconnect:
            continue
        if any(
            o is not p and host in o.hosts and p.end <= o.start < p.end + facts.reconnect
            for o in partitions
        ):
            continue  # cut off again before it had its time to come back
        signs = [e.at for e in facts.journals.get(pid, []) if e.ok and e.at >= p.end]
        signs += [at for at in runs_of.get(pid, []) if at >= p.end]
        if signs and min(signs) - p.end <= facts.reconnect:
            report.reconnected.append(min(signs) - p.end)
        elif last_run > p.end + facts.reconnect:  # work was left for it
            late = f"{min(signs) - p.end:.1f}s" if signs else "never"
            report.not_resumed.append(
                f"pid {pid} on host {host}: back at work {late} after the {p.kind} healed "
                f"(bound {facts.reconnect}s)"
            )


def _taken_over(
    report: Report,
    kinds: dict[str, str],
    ledger: dict[str, list[Run]],
    chaos: Chaos,
    p: Partition,
    facts: Facts,
) -> None:
    """The runs a cut-off worker had going when ``p`` began that ran again after it: how soon
    they did, and whether their worker learnt it lost the claim."""
    for job_id, runs in ledger.items():
        for r, n in itertools.pairwise(runs):
            if not (r.at <= p.start < n.at and facts.host_of.get(r.pid) in p.hosts):
                continue
            if kinds.get(job_id) == "flaky" and r.attempt == 1:
                continue  # failed on purpose: its retry is no takeover
            if facts.cause(r, n.at, chaos) != f"partition ({p.kind})":
                continue  # run again for another reason (a kill, a freeze)
            if facts.partition_of(r, n.at, chaos) != p:
                continue  # run again for another fault
            if p.kind != "server":  # then no worker was left to run it meanwhile
                report.elsewhere.append(n.at - p.start)
            if r.pid in facts.killed and facts.killed[r.pid] < p.end + facts.reconnect:
                continue
            last = max((e.at for e in facts.journals.get(r.pid, [])), default=0.0)
            if last < p.end + facts.reconnect:  # stopped (the soak ended) before it could be
                continue
            told = [
                e.kind
                for e in facts.journals.get(r.pid, [])
                if e.job == job_id and e.at >= r.at and e.kind in ("lost", "refused")
            ]
            if told:
                report.told[told[0]] += 1
            else:
                report.unaware.append(
                    f"{job_id}: run by pid {r.pid} when the {p.kind} began, again by pid "
                    f"{n.pid} {n.at - p.start:.1f}s later; pid {r.pid} was never told"
                )
