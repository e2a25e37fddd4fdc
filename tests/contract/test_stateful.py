"""The contract as a state machine: random sequences of enqueue, claim, heartbeat, settle with
fresh and stale tokens, cancel, retry, recovery, pause and the passing of time, run on each
backend and on the in-memory reference backend side by side. After every step both must have
answered alike and hold every job in the same state with the same attempts.

The plain claim takes every eligible job and compares them as a set. The ordered claims take
one or two jobs, alone or batched with a settle (``settle_and_claim``), and must take the same
jobs in the same order as the model: priority first, then FIFO, after enqueues, settles that
put a job back in line (retries without delay, releases), manual retries and recoveries
(RELIABILITY.md I8, I10). They run while no delayed job is due, the one place where the
backends' orders differ by design (docs/guarantees.md, Ordering). A broker delivers
asynchronously: the backend's claim is repeated until it has handed out what the model did.

A second machine adds the decisions of ``relaymq.policy``, so that a port of one (Lua, SQL)
that drifts fails here: jobs that depend on others under both policies (their dependencies
complete, fail, are cancelled or removed, or never were), with the error of a job its
dependency failed. A third machine holds the queue limits (``allowance``, ``KeyBudget``): no
job in it is ever delayed (what a limit lets through follows the claim order); its claims take
the same jobs in the same order as the model's and report the queue held back (``limited``)
alike, while time rolls the windows over.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from relaymq.backends.base import Backend
from relaymq.backends.memory import InMemoryBackend
from relaymq.errors import JobNotFoundError
from relaymq.job import Claim, DependencyPolicy, Job, JobState, KeyMode, KeyRule
from relaymq.records.limits import Limits
from relaymq.records.store import Beat, ClaimBatch, Outcome, Settle
from relaymq.testing import FakeClock
from tests.support.cases import BackendCase
from tests.support.jobs import ModelWithOneJobCalls, OneJobCalls, new_job, queue_name

T = TypeVar("T")

IDS = [f"j{i}" for i in range(6)]
KEYED_IDS = [f"t{i}" for i in range(6)]
"""The ids of keyed (throttled or debounced) jobs: their own, so keys meet fresh ids."""
DEP_IDS = [f"d{i}" for i in range(4)]
"""The ids of jobs that depend on others (the policy machine)."""
DEPS = [*IDS[:3], *IDS[:3], *DEP_IDS[:2], "gone"]
"""What they depend on: jobs every example starts with (mostly), dependents (chains), and a
job that never was (it ended 'removed')."""
THRESHOLD = 30.0
CLAIM_ALL = 50
DELIVERY_DEADLINE = 10.0
"""Seconds a backend may take to hand out what the model handed out (a broker's push)."""

SETTINGS = settings(
    derandomize=True,  # the same sequences on every run: CI never meets a new one by chance
    max_examples=40,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
POLICY_SETTINGS = settings(SETTINGS, max_examples=20)


@dataclasses.dataclass
class Held:
    """One claim handed out by both: the backend's and the model's token for the same attempt."""

    job_id: str
    real: Claim
    model: Claim


def broker(case: BackendCase) -> bool:
    """Whether the case's backend hands out a broker's deliveries (its store decides)."""
    return case.name.startswith("rabbitmq")


def machine_for(
    case: BackendCase, tmp: Path, seen: Counter[str], policies: bool = False
) -> type[RuleBasedStateMachine]:
    """The machine, on one backend handle for every example (a new queue each); ``seen``
    counts what the examples did, so the test can tell that they reached the cases.
    ``policies``: the machine with dependencies too (``PolicyContract``)."""
    loop = asyncio.new_event_loop()
    clock = FakeClock()

    def run(awaitable: Awaitable[T]) -> T:
        return loop.run_until_complete(awaitable)  # type: ignore[arg-type]

    backend = OneJobCalls(run(case.make(clock, tmp)))
    InMemoryBackend = ModelWithOneJobCalls  # the name the machine's source uses

    class Contract(RuleBasedStateMachine):
        @initialize()
        def start(self) -> None:
            # Hypothesis seeds the global random module alike for every example; aiormq draws
            # its consumer tags from it, so equal tags would meet on one channel.
            random.seed()
            seen["examples"] += 1
            self.real: Backend = backend
            self.model = InMemoryBackend(clock=clock)
            self.q = queue_name("sm")
            self.held: list[Held] = []
            self.enqueue(IDS[:3], 0, 0)  # every example starts with work to claim

        def both(self, method: str, *args: Any) -> tuple[Any, Any]:
            """The same call on the backend and the model; errors must match by type."""
            out = []
            for b in (self.real, self.model):
                try:
                    out.append(run(getattr(b, method)(*args)))
                except JobNotFoundError as e:
                    out.append(type(e))
            return out[0], out[1]

        @rule(
            ids=st.lists(st.sampled_from(IDS), min_size=1, max_size=4),
            delay=st.sampled_from([0, 0, 20]),
            priority=st.sampled_from([0, 3]),
        )
        def enqueue(self, ids: list[str], delay: float, priority: int) -> None:
            jobs = [new_job(self.q, i, delay=delay, priority=priority) for i in ids]
            real, model = self.both("enqueue", jobs)
            assert [a.duplicate for a in real] == [a.duplicate for a in model]

        @rule(
            ids=st.lists(st.sampled_from(KEYED_IDS), min_size=1, max_size=3),
            mode=st.sampled_from([KeyMode.THROTTLE, KeyMode.DEBOUNCE]),
            key=st.sampled_from(["k1", "k2"]),
            window=st.sampled_from([10.0, 60.0]),
        )
        def enqueue_keyed(self, ids: list[str], mode: KeyMode, key: str, window: float) -> None:
            throttle = mode is KeyMode.THROTTLE
            rule = KeyRule(key, mode, window if throttle else 0.0)
            jobs = [new_job(self.q, i, rule=rule, delay=0 if throttle else 5.0) for i in ids]
            real, model = self.both("enqueue", jobs)
            assert real == model  # ids, duplicates, and the jobs each one replaced
            dropped = [a.duplicate and a.id != j.id for a, j in zip(model, jobs, strict=True)]
            seen["keyed dropped"] += sum(dropped)
            seen["keyed replaced"] += sum(a.replaced is not None for a in model)

        def claim_like(self, expected: list[Job], got: list[Job], limit: int) -> list[Job]:
            """``got`` (the backend's first claim), and what its further claims hand out up
            to ``expected``'s length (a broker's deliveries on their way)."""
            deadline = time.monotonic() + DELIVERY_DEADLINE
            got = list(got)
            while len(got) < len(expected) and time.monotonic() <= deadline:
                more = run(self.real.claim([self.q], "w", limit - len(got))).jobs
                if not more:
                    run(asyncio.sleep(0.01))  # a broker's delivery on its way: look again
                got += more
            ids = [j.id for j in got]
            assert len(ids) == len(set(ids)), f"handed out twice by one claim round: {ids}"
            return got

        def hold(self, expected: list[Job], got: list[Job]) -> None:
            real = {j.id: j for j in got}
            for j in expected:
                self.held.append(Held(j.id, real[j.id].claim, j.claim))

        def due_jobs(self) -> bool:
            """Whether the model holds a delayed job that is due (the ordered claims wait)."""
            delayed = run(self.model.list_jobs(self.q, JobState.DELAYED, 0, CLAIM_ALL))
            return any(j.run_at is not None and j.run_at <= clock() for j in delayed)

        @rule()
        def claim(self) -> None:
            expected = run(self.model.claim([self.q], "w", CLAIM_ALL)).jobs
            first = run(self.real.claim([self.q], "w", CLAIM_ALL)).jobs
            got = self.claim_like(expected, first, CLAIM_ALL)
            assert sorted(j.id for j in got) == sorted(j.id for j in expected)
            seen["claimed"] += len(expected)
            self.hold(expected, got)

        @rule(limit=st.sampled_from([1, 2]))
        def claim_in_order(self, limit: int) -> None:
            if self.due_jobs():
                return
            expected = run(self.model.claim([self.q], "w", limit)).jobs
            first = run(self.real.claim([self.q], "w", limit)).jobs
            got = self.claim_like(expected, first, limit)
            assert [j.id for j in got] == [j.id for j in expected], "claim order"
            seen["claimed in order"] += len(expected)
            self.hold(expected, got)

        @precondition(lambda self: self.held)
        @rule(
            data=st.data(),
            outcome=st.sampled_from(
                [Outcome.COMPLETE, Outcome.RETRY, Outcome.RETRY, Outcome.RELEASE, Outcome.FAIL]
            ),
            delay=st.sampled_from([0.0, 0.0, 10.0]),
            limit=st.sampled_from([1, 2]),
        )
        def settle_and_claim(
            self, data: st.DataObject, outcome: Outcome, delay: float, limit: int
        ) -> None:
            """A worker's settle with its next claim batched (one round trip where the backend
            can): the claim sees what the settle did, a job put back in line included."""
            if self.due_jobs():
                return
            # one job at most once in a batch (as a worker settles): fresh or stale claims
            hs = data.draw(
                st.lists(st.sampled_from(self.held), min_size=1, max_size=2,
                         unique_by=lambda h: h.job_id)
            )  # fmt: skip
            delay = delay if outcome is Outcome.RETRY else 0.0
            outcomes = [outcome] + [Outcome.COMPLETE] * (len(hs) - 1)  # the others complete
            pairs = list(zip(hs, outcomes, strict=True))
            real = run(self.real.settle_and_claim(
                [Settle(h.real, o, b"1", "boom", delay) for h, o in pairs], [self.q], "w", limit
            ))  # fmt: skip
            model = run(self.model.settle_and_claim(
                [Settle(h.model, o, b"1", "boom", delay) for h, o in pairs], [self.q], "w", limit
            ))  # fmt: skip
            assert real.applied == model.applied, f"{outcomes} on {[h.job_id for h in hs]}"
            assert real.claim_error is None and model.batch is not None and real.batch is not None
            expected = model.batch.jobs
            got = self.claim_like(expected, real.batch.jobs, limit)
            assert [j.id for j in got] == [j.id for j in expected], (
                f"claim order after {outcomes} on {[h.job_id for h in hs]}"
            )
            back = outcome is Outcome.RELEASE or (outcome is Outcome.RETRY and delay <= 0)
            if back and model.applied[0] and hs[0].job_id in [j.id for j in expected]:
                seen["claimed again with its settle"] += 1
            seen["settle_and_claim"] += 1
            self.hold(expected, got)

        @precondition(lambda self: self.held)
        @rule(data=st.data())
        def heartbeat(self, data: st.DataObject) -> None:
            h = data.draw(st.sampled_from(self.held))
            real = run(self.real.heartbeat([Beat(h.real)]))
            model = run(self.model.heartbeat([Beat(h.model)]))
            assert real == model
            seen["heartbeat held" if model[0].held else "heartbeat refused"] += 1

        @precondition(lambda self: self.held)
        @rule(
            data=st.data(),
            outcome=st.sampled_from(
                [Outcome.COMPLETE, Outcome.RETRY, Outcome.FAIL, Outcome.RELEASE, Outcome.CANCEL]
            ),
            delay=st.sampled_from([0.0, 10.0]),
        )
        def settle(self, data: st.DataObject, outcome: Outcome, delay: float) -> None:
            h = data.draw(st.sampled_from(self.held))  # fresh or stale alike
            delay = delay if outcome is Outcome.RETRY else 0.0
            real = run(self.real.settle([Settle(h.real, outcome, b"1", "boom", delay)]))
            model = run(self.model.settle([Settle(h.model, outcome, b"1", "boom", delay)]))
            assert real == model, f"{outcome} on {h.job_id}"
            seen[f"settle {'applied' if model[0] else 'refused'}"] += 1

        @rule(job_id=st.sampled_from(IDS))
        def cancel(self, job_id: str) -> None:
            real, model = self.both("cancel", self.q, job_id)
            assert real == model

        @rule(job_id=st.sampled_from(IDS))
        def retry(self, job_id: str) -> None:
            real, model = self.both("retry_job", self.q, job_id)
            assert real == model

        @rule(seconds=st.sampled_from([1.0, 15.0, 40.0]))
        def time_passes(self, seconds: float) -> None:
            clock.advance(seconds)

        @rule(max_stalled=st.sampled_from([0, 2]))
        def recover(self, max_stalled: int) -> None:
            real, model = self.both("recover_stalled", self.q, THRESHOLD, max_stalled)
            assert sorted(real.requeued) == sorted(model.requeued)
            assert sorted(real.failed) == sorted(model.failed)
            seen["recovered"] += len(model.requeued) + len(model.failed)

        @rule(paused=st.sampled_from([True, False, False]))  # resumed more often than not
        def pause_or_resume(self, paused: bool) -> None:
            self.both("pause" if paused else "resume", self.q)

        @invariant()
        def same_jobs(self) -> None:
            if not hasattr(self, "q"):
                return
            real = run(self.real.get_jobs(self.q, IDS + KEYED_IDS))
            model = run(self.model.get_jobs(self.q, IDS + KEYED_IDS))
            seen = [(self.shown_state(j), j.attempts) if j else None for j in real]
            assert seen == [(self.shown_state(j), j.attempts) if j else None for j in model]
            assert self.shown_counts(self.real) == self.shown_counts(self.model)

        due_as_waiting = False
        """Whether the invariants count a due delayed job as waiting (``PolicyContract``)."""

        def shown_state(self, job: Job) -> JobState:
            """A job's state as the invariants compare it."""
            if not self.due_as_waiting or job.state is not JobState.DELAYED:
                return job.state
            due = job.run_at is not None and job.run_at <= clock()
            return JobState.WAITING if due else job.state

        def shown_counts(self, b: Backend) -> dict[JobState, int]:
            """``b``'s counts of the queue, due jobs counted as ``shown_state`` shows them."""
            counts = dict(run(b.counts(self.q)))
            if not self.due_as_waiting:
                return counts
            delayed = run(b.list_jobs(self.q, JobState.DELAYED, 0, CLAIM_ALL))
            due = sum(self.shown_state(j) is not JobState.DELAYED for j in delayed)
            counts[JobState.DELAYED] -= due
            counts[JobState.WAITING] += due
            return counts

        def teardown(self) -> None:
            if hasattr(self, "q"):
                run(self.real.obliterate(self.q))
                # a broker's deliveries of the queue that no claim took (the ordered claims
                # take one or two) are found stale and let go, or they would fill its window
                assert not run(self.real.claim([self.q], "w", CLAIM_ALL)).jobs
                # as a worker learns its claims are gone: a broker then lets go of their
                # deliveries, which would otherwise fill its window for the next examples
                beats = [Beat(h.real) for h in self.held]
                assert not any(r.held for r in run(self.real.heartbeat(beats)))

    class PolicyContract(Contract):
        @initialize(policy=st.sampled_from([DependencyPolicy.FAIL, DependencyPolicy.IGNORE]))
        def start(self, policy: DependencyPolicy) -> None:  # type: ignore[override]
            Contract.start(self)
            self.blocked: set[str] = set()
            """Dependents the model held blocked at some point."""
            self.enqueue_dependent(DEP_IDS[-1], [IDS[0]], policy, None)  # one waits for j0

        @rule(
            job_id=st.sampled_from(DEP_IDS[:-1]),
            deps=st.lists(st.sampled_from(DEPS), min_size=1, max_size=3),
            policy=st.sampled_from([DependencyPolicy.FAIL, DependencyPolicy.IGNORE]),
            limit_key=st.sampled_from([None, "a", "b"]),
        )
        def enqueue_dependent(
            self, job_id: str, deps: list[str], policy: DependencyPolicy, limit_key: str | None
        ) -> None:
            """A job that waits for others: blocked, failed at once (a dependency that ended
            badly, or never was, under FAIL), or waiting (``relaymq.policy``)."""
            deps = [d for d in deps if d != job_id] or ["gone"]
            job = new_job(self.q, job_id, depends_on=tuple(deps), on_dependency_failure=policy,
                          limit_key=limit_key)  # fmt: skip
            real, model = self.both("enqueue", [job])
            assert real == model
            seen["dependent enqueued"] += not model[0].duplicate

        @rule(ids=st.lists(st.sampled_from(IDS[:4] + DEP_IDS), min_size=1, max_size=2))
        def remove(self, ids: list[str]) -> None:
            """Removed before it ended: its dependents count it as ended 'removed'."""
            real, model = self.both("remove_jobs", self.q, list(dict.fromkeys(ids)))
            assert real == model

        due_as_waiting = case.name == "mongodb"
        """MongoDB has no promotion step (docs/guarantees.md, Ordering): a delayed job that
        fell due stays ``delayed`` until a claim takes it, where the model's claims make it
        ``waiting``. Only this machine leaves such a job unclaimed (a dependent released by the
        settle of a ``settle_and_claim`` whose claim takes one job); on MongoDB, and on both
        sides, a due job counts as waiting."""

        @invariant()
        def same_dependents(self) -> None:
            """The jobs with dependencies: the same states and attempts, and a job failed by
            its dependency with the same error (``dependency <id> ended <state>``)."""
            if not hasattr(self, "blocked"):
                return
            real = run(self.real.get_jobs(self.q, DEP_IDS))
            model = run(self.model.get_jobs(self.q, DEP_IDS))
            assert [(self.shown_state(j), j.attempts, j.error) if j else None for j in real] == [
                (self.shown_state(j), j.attempts, j.error) if j else None for j in model
            ]
            for j in model:
                if j is None:
                    continue
                if j.state is JobState.BLOCKED:
                    self.blocked.add(j.id)
                elif j.id in self.blocked and j.state is not JobState.FAILED:
                    seen["dependent released"] += 1
                if j.state is JobState.FAILED and (j.error or "").startswith("dependency "):
                    seen["dependent failed by its dependency"] += 1

    machine = PolicyContract if policies else Contract
    machine.close = lambda: (run(backend.close()), loop.close())  # type: ignore[attr-defined]
    return machine


@pytest.mark.timeout(300)  # the MongoDB test server needs about a minute for the 40 examples
def test_random_sequences_match_the_reference_backend(case: BackendCase) -> None:
    if broker(case):
        # a job put back in line comes after what the broker pushed already: timing decides
        pytest.skip("a broker's claims follow its delivery order, which timing decides")
    seen: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        machine = machine_for(case, Path(tmp), seen)
        try:
            run_state_machine_as_test(machine, settings=SETTINGS)
        finally:
            machine.close()  # type: ignore[attr-defined]
    # the examples reached fresh and stale writes and recovery, not only empty queues
    wanted = ["claimed", "heartbeat held", "heartbeat refused", "settle applied",
              "settle refused", "recovered", "keyed dropped", "keyed replaced",
              "claimed in order", "settle_and_claim", "claimed again with its settle"]  # fmt: skip
    assert all(seen[w] > 0 for w in wanted), dict(seen)


# The MongoDB test server takes 45 s for it alone, but late in the whole suite up to 340 s: a
# timeout that interrupts an example leaves the machine's loop mid-call, and the examples
# after it fail for that, not for the backend.
@pytest.mark.timeout(900)
def test_policy_decisions_match_the_reference_backend(case: BackendCase) -> None:
    """The machine with dependencies (``relaymq.policy``) on the backend."""
    if broker(case):
        # A broker publishes a dependent its dependency released at its next promotion (every
        # promote_interval of the backend's clock), so its claims cannot follow the model's
        # step by step. Its metadata store decides, and the store's own run covers it.
        pytest.skip("a broker's metadata store makes the policy decisions")
    seen: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        machine = machine_for(case, Path(tmp), seen, policies=True)
        try:
            run_state_machine_as_test(machine, settings=POLICY_SETTINGS)
        finally:
            machine.close()  # type: ignore[attr-defined]
    wanted = ["dependent enqueued", "dependent released", "dependent failed by its dependency"]
    assert all(seen[w] > 0 for w in wanted), dict(seen)


LIMITS = [
    Limits(max_active=3),
    Limits(rate=4, per=5),
    Limits(max_active=2, rate=3, per=10),
    Limits(key_rate=1, key_per=5),
    Limits(max_active=3, rate=5, per=10, key_rate=2, key_per=5),
    Limits(key_max_active=1),
    Limits(max_active=3, key_rate=2, key_per=5, key_max_active=2),
    Limits(fair=True, weights=(("a", 2),)),
    Limits(fair=True, key_max_active=1),
]
"""Each is set on the queue of the examples of one run of the limit machine."""
LIMIT_SETTINGS = settings(SETTINGS, max_examples=6, stateful_step_count=30)


def limit_machine_for(case: BackendCase, tmp: Path, seen: Counter[str]) -> type[Any]:
    """The machine of queue limits (``relaymq.policy.allowance``, ``KeyBudget``) and of
    sequences (``relaymq.policy.sequence_head``, on the backends that keep them): no job is
    ever delayed, so every backend claims in the model's order (priority, then FIFO) and a
    limit must let through the same jobs, and report the queue ``limited`` alike."""
    loop = asyncio.new_event_loop()
    clock = FakeClock()

    def run(awaitable: Awaitable[T]) -> T:
        return loop.run_until_complete(awaitable)  # type: ignore[arg-type]

    backend = run(case.make(clock, tmp))

    class LimitContract(RuleBasedStateMachine):
        limits = LIMITS[0]  # the run's (set on the class)

        @initialize()
        def start(self) -> None:
            seen["examples"] += 1
            # every example starts at the start of a window (the clock runs on across them),
            # so the same steps meet the same windows when hypothesis replays an example
            clock.advance(-clock() % 10)  # 10 s: a multiple of every window of LIMITS
            self.real: Backend = backend
            self.model = InMemoryBackend(clock=clock)
            self.q = queue_name("lim")
            seen["keeps sequences"] = backend.capabilities.sequences
            self.held: list[Held] = []
            self.ids: list[str] = []
            for b in (self.real, self.model):
                run(b.set_limits(self.q, self.limits))
            self.enqueue(3, 0, "a")  # work of one key: the key rate holds some back
            self.enqueue(3, 0, None)

        @rule(
            n=st.integers(min_value=1, max_value=4),
            priority=st.sampled_from([0, 0, 3]),
            limit_key=st.sampled_from([None, "a", "b"]),
            sequence=st.sampled_from([None, None, "s", "t"]),
        )
        def enqueue(
            self, n: int, priority: int, limit_key: str | None, sequence: str | None = None
        ) -> None:
            ids = [f"l{len(self.ids) + i}" for i in range(n)]  # fresh: never run out
            self.ids += ids
            if not self.real.capabilities.sequences:
                sequence = None  # refused there (test_sequences.py)
            jobs = [
                new_job(self.q, i, priority=priority, limit_key=limit_key, sequence=sequence)
                for i in ids
            ]
            real = run(self.real.enqueue(jobs))
            model = run(self.model.enqueue(jobs))
            assert [a.duplicate for a in real] == [a.duplicate for a in model]

        def compare(self, real: ClaimBatch, model: ClaimBatch, what: str) -> None:
            """The same jobs in the same order, and the same queues held back, each with the
            seconds to the end of its window (whole seconds on the fake clock: exact) or None
            (it waits for active jobs to end) alike."""
            assert [j.id for j in real.jobs] == [j.id for j in model.jobs], what
            assert real.limited == pytest.approx(model.limited, abs=1e-6), f"limited: {what}"
            if model.limited:
                kind = "for the window" if model.limited[self.q] is not None else "for jobs"
                seen[f"limited {kind}"] += 1
                seen[f"limited {kind} yet claimed"] += bool(model.jobs)
                seen[f"limited: {self.limits.describe()}"] += 1
            seen["claimed"] += len(model.jobs)
            seen["claimed of a sequence"] += sum(j.sequence is not None for j in model.jobs)
            real_claims = {j.id: j.claim for j in real.jobs}
            self.held += [Held(j.id, real_claims[j.id], j.claim) for j in model.jobs]

        @rule(limit=st.sampled_from([1, 3, CLAIM_ALL]))
        def claim(self, limit: int) -> None:
            real = run(self.real.claim([self.q], "w", limit))
            model = run(self.model.claim([self.q], "w", limit))
            self.compare(real, model, f"claim of {limit}")

        @precondition(lambda self: self.held)
        @rule(
            data=st.data(),
            outcome=st.sampled_from(
                [Outcome.COMPLETE, Outcome.FAIL, Outcome.RELEASE, Outcome.RETRY]
            ),
            limit=st.sampled_from([0, 1, CLAIM_ALL]),
        )
        def settle(self, data: st.DataObject, outcome: Outcome, limit: int) -> None:
            """A settle (put back in line without delay), alone or with the next claim (1+)."""
            h = data.draw(st.sampled_from(self.held[-4:]))  # the latest: mostly still held
            real_s, model_s = ([Settle(c, outcome, b"1", "boom", 0.0)] for c in (h.real, h.model))
            real = run(self.real.settle_and_claim(real_s, [self.q], "w", limit))
            model = run(self.model.settle_and_claim(model_s, [self.q], "w", limit))
            assert real.applied == model.applied, f"{outcome} on {h.job_id}"
            seen[f"settle {'applied' if model.applied[0] else 'refused'}"] += 1
            if limit:
                assert real.batch is not None and model.batch is not None, real.claim_error
                self.compare(real.batch, model.batch, f"{outcome} on {h.job_id} and claim")

        @rule(seconds=st.sampled_from([1.0, 3.0, 5.0]))
        def time_passes(self, seconds: float) -> None:
            clock.advance(seconds)  # rate and key windows roll over

        @invariant()
        def same_jobs(self) -> None:
            if not hasattr(self, "q"):
                return
            real = run(self.real.get_jobs(self.q, self.ids))
            model = run(self.model.get_jobs(self.q, self.ids))
            assert [(j.state, j.attempts) if j else None for j in real] == [
                (j.state, j.attempts) if j else None for j in model
            ]
            assert not any(j and j.state is JobState.DELAYED for j in model), "none delayed"
            assert run(self.real.counts(self.q)) == run(self.model.counts(self.q))

        def teardown(self) -> None:
            if hasattr(self, "q"):
                run(self.real.obliterate(self.q))

    LimitContract.close = lambda: (run(backend.close()), loop.close())  # type: ignore[attr-defined]
    return LimitContract


@pytest.mark.timeout(300)  # a failure's shrinking takes minutes; a passing run, seconds
def test_limit_decisions_match_the_reference_backend(case: BackendCase) -> None:
    if broker(case):
        # A broker offers its store the jobs in the order it delivered them, not the model's
        # order, so a limit lets other jobs through (as many, for max_active and rate).
        # test_limits.py covers its limits; its store's own run covers the arithmetic.
        pytest.skip("a broker's claims follow its delivery order")
    seen: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        machine = limit_machine_for(case, Path(tmp), seen)
        try:
            for machine.limits in LIMITS:  # a run each: every one of them is met
                run_state_machine_as_test(machine, settings=LIMIT_SETTINGS)
        finally:
            machine.close()  # type: ignore[attr-defined]
    # each of the limits held jobs back, for active jobs and for the window, some in part
    wanted = ["limited for jobs", "limited for the window"]
    wanted += [f"{w} yet claimed" for w in wanted] + ["settle applied"]
    wanted += ["claimed of a sequence"] if seen["keeps sequences"] else []
    wanted += [f"limited: {lim.describe()}" for lim in LIMITS if lim != LIMITS[-2]]  # fair alone
    # never holds a queue back: it only chooses
    assert all(seen[w] > 0 for w in wanted), dict(seen)
