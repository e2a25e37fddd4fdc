"""The decisions every backend makes inside its transaction, written once.

These are pure functions of records: no I/O, no clock, no backend. The Python-driven backends
(memory, SQLite, MongoDB, and PostgreSQL for what it decides in Python) read what a decision
needs, call the function here, and write its answer in the same atomic step. A port in another
language (Redis Lua, SQL triggers and statements) names the function it mirrors in its header,
and the differential state machine (tests/contract/test_stateful.py) runs every backend against
the in-memory one, so a port that drifts from this module fails there.

- keys (``KeyRule``): ``key_step`` — create the new job, answer it as a duplicate of the key's
  holder (throttle), or replace the holder (debounce);
- dependencies (``DependencyPolicy``): ``dependencies_at_enqueue`` for a new job, and
  ``dependency_ended`` when one of a blocked job's dependencies ends;
- limits (``relaymq.limits.Limits``): ``allowance`` (``max_active`` and ``rate``) and
  ``KeyBudget`` (``key_rate``, ``key_max_active``) for a claim;
- sequences (``NewJob.sequence``): ``holds_sequence`` and ``sequence_head`` for a claim;
- retry and backoff live in ``relaymq.retry`` (the worker decides; no backend does).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from relaymq.job import DependencyPolicy, JobState, KeyMode, SequenceFailure
from relaymq.records.limits import Limits

# -- keys (throttle and debounce) -----------------------------------------------------------------

HOLDS: frozenset[str] = frozenset({JobState.WAITING, JobState.DELAYED, JobState.ACTIVE})
"""A throttle key's holder in one of these states holds it past its window."""
REPLACEABLE: frozenset[str] = frozenset({JobState.WAITING, JobState.DELAYED})
"""A debounce key's holder in one of these states is replaced (deleted) by the new job."""


class KeyStep(enum.StrEnum):
    """What a keyed enqueue does (``key_step``)."""

    CREATE = "create"
    """Store the new job; it takes the key."""
    DUPLICATE = "duplicate"
    """Store nothing: the answer is a duplicate of the key's holder."""
    REPLACE = "replace"
    """Delete the holder (it has not started), store the new job; it takes the key."""


def key_step(mode: KeyMode, holder: str | None, in_window: bool) -> KeyStep:
    """The rule of a job enqueued with a ``KeyRule`` of ``mode`` whose key is held by a job in
    state ``holder`` (None: the key is free, or its holder is gone) with its throttle window
    still open (``in_window``: the key's ``until``, enqueue time + window, is after now).

    Throttle: a duplicate while the window is open or the holder has not ended. Debounce: the
    holder is replaced while it waits (a running holder keeps running). The new job then holds
    the key until now + its rule's window."""
    if mode is KeyMode.THROTTLE:
        return KeyStep.DUPLICATE if in_window or holder in HOLDS else KeyStep.CREATE
    return KeyStep.REPLACE if holder in REPLACEABLE else KeyStep.CREATE


# -- dependencies ---------------------------------------------------------------------------------

NOT_ENDED: frozenset[str] = frozenset(
    {JobState.BLOCKED, JobState.WAITING, JobState.DELAYED, JobState.ACTIVE}
)
"""A dependency in one of these states has not ended; any other (or none: removed) has."""


def dependency_error(dep: str, ended: str | None) -> str:
    """The error of a job failed because ``dep`` ended in ``ended`` (None, or a state nobody
    knows: removed before it ended)."""
    known = ended is not None and ended in {s.value for s in JobState}
    return f"dependency {dep} ended {ended if known else 'removed'}"


class DependentStep(enum.StrEnum):
    """Where a job with dependencies goes (``dependencies_at_enqueue``, ``dependency_ended``)."""

    BLOCKED = "blocked"
    """It waits for the dependencies still pending."""
    DUE = "due"
    """Every dependency has ended: it runs (a new job waits; a blocked one becomes delayed,
    due at once)."""
    FAILED = "failed"
    """A dependency ended other than completed under ``DependencyPolicy.FAIL``: it fails,
    into the DLQ, with ``error``; its own dependents learn it in turn."""


@dataclass(frozen=True, slots=True)
class Dependent:
    step: DependentStep
    error: str | None = None
    """``FAILED``: ``dependency <id> ended <state>``."""
    waits_for: tuple[str, ...] = ()
    """``dependencies_at_enqueue``, ``BLOCKED``: the dependencies it waits for."""
    left: int = 0
    """``dependency_ended``, ``BLOCKED``: how many dependencies it still waits for."""


def dependencies_at_enqueue(
    depends_on: Sequence[str], states: Mapping[str, str], policy: DependencyPolicy
) -> Dependent:
    """A new job that depends on ``depends_on``, whose stored states are ``states`` (an id
    missing from it does not exist: removed before the job came). It waits for those that have
    not ended; under ``FAIL`` the first (in order) that ended other than completed fails it."""
    ids = tuple(dict.fromkeys(depends_on))
    pending = tuple(i for i in ids if states.get(i) in NOT_ENDED)
    if policy is DependencyPolicy.FAIL:
        for i in ids:
            if i not in pending and states.get(i) != JobState.COMPLETED:
                return Dependent(DependentStep.FAILED, dependency_error(i, states.get(i)))
    return Dependent(DependentStep.BLOCKED if pending else DependentStep.DUE, waits_for=pending)


def dependency_ended(
    dep: str, ended: str | None, policy: DependencyPolicy, pending: int
) -> Dependent:
    """A blocked job under ``policy`` that waited for ``pending`` dependencies (``dep``
    among them) learns that ``dep`` ended in ``ended`` (None: removed before it ended)."""
    if ended != JobState.COMPLETED and policy is DependencyPolicy.FAIL:
        return Dependent(DependentStep.FAILED, dependency_error(dep, ended))
    left = max(0, pending - 1)
    return Dependent(DependentStep.BLOCKED if left else DependentStep.DUE, left=left)


# -- limits ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Allowance:
    """What one claim of a limited queue may take (``allowance``)."""

    take: int
    """How many jobs the claim may start now."""
    window: int
    """The current rate window (its index) ..."""
    used: int
    """... and the jobs started in it before this claim."""
    retry_in: float | None
    """When the limit stopped the claim: seconds until the rate window ends, or None when it
    waits for active jobs to end. Meaningless when nothing was held back."""


def allowance(
    limits: Limits, active: int, window: int, used: int, now: float, want: int
) -> Allowance:
    """How many of ``want`` jobs a claim at ``now`` may start, given the queue's ``active``
    jobs and its stored rate window (``window`` index, ``used`` starts in it). The rate counts
    in fixed windows of ``per`` seconds: window ``k`` is ``[k * per, (k + 1) * per)``."""
    take = want
    retry_in: float | None = None
    current = math.floor(now / limits.per)
    if window != current:
        window, used = current, 0
    if limits.max_active is not None:
        take = min(take, max(0, limits.max_active - active))
    if limits.rate is not None and limits.rate - used < take:
        take = max(0, limits.rate - used)
        retry_in = max(0.0, (current + 1) * limits.per - now)
    return Allowance(take, window, used, retry_in)


KEY_SCAN = 1000
"""A claim of a queue with ``key_rate`` looks at most this many waiting jobs, in order, past
those whose key has used its window: beyond that, jobs of other keys wait for the next claim
(in the next key window at the latest, when the keys in front start again)."""


class KeyBudget:
    """What each limit key may still start in a claim: within ``Limits.key_rate``, the starts
    counted in the current key window (``key_window`` index, ``used``: key -> starts), plus the
    claim's own; within ``Limits.key_max_active``, the key's ``active`` jobs (key -> count,
    every job of the queue in state ``active``, stalled ones included), plus the claim's own;
    with ``Limits.fair``, the starts of each key in the current round (``served``): a key
    that started its weight (1 by default) in this round waits until every key with waiting
    jobs has had its turn, when the claim begins a new round (``next_round``).
    ``window``, ``used`` and ``served`` are what to store back afterwards."""

    def __init__(
        self,
        limits: Limits,
        key_window: int,
        used: Mapping[str, int],
        now: float,
        active: Mapping[str, int] | None = None,
        served: Mapping[str, int] | None = None,
    ) -> None:
        self.rate = limits.key_rate
        self.per = limits.key_per
        self.cap = limits.key_max_active
        self.window = math.floor(now / limits.key_per)
        self.used: dict[str, int] = (
            dict(used) if key_window == self.window and self.rate is not None else {}
        )
        self.active: dict[str, int] = dict(active or {})
        self.fair = limits.fair
        self.weights = dict(limits.weights)
        self.served: dict[str, int] = dict(served or {}) if limits.fair else {}
        self.served_elsewhere = False
        """Whether keys missing from ``served`` had their turn in this round: a backend that
        reads the counts of the keys it looks at only (and leaves out those that had their
        turn as it reads the line) gives them to ``served`` as it goes."""
        self.new_round = False
        """Whether this claim began a new round (``next_round``)."""
        self.held_back = False
        """Whether a job was refused (its key had used its window, or was at its cap)."""
        self.rate_held = False
        """Whether a job was refused by the key rate (it may start when the window ends)."""

    def refuses(self, key: str | None) -> bool:
        """Whether ``key`` is at its cap or has used its window, so that none of its jobs may
        start now (it then held a job back); counts nothing. A job passed over for another
        reason too (its sequence) is held back by its key first."""
        if key is None:
            return False
        if self.cap is not None and self.active.get(key, 0) >= self.cap:
            self.held_back = True
            return True
        if self.rate is not None and self.used.get(key, 0) >= self.rate:
            self.held_back = self.rate_held = True
            return True
        return False

    def take(self, key: str | None) -> bool:
        """Whether a job of ``key`` may start now; if so, it is counted."""
        if key is None:
            return True
        if self.refuses(key):
            return False
        if self.fair and self.served.get(key, 0) >= self.weights.get(key, 1):
            return False  # had its turn in this round: not held back, passed over
        if self.rate is not None:
            self.used[key] = self.used.get(key, 0) + 1
        if self.cap is not None:
            self.active[key] = self.active.get(key, 0) + 1
        if self.fair:
            self.served[key] = self.served.get(key, 0) + 1
        return True

    def retry_in(self, now: float) -> float | None:
        """Seconds until the key window ends (when the keys that used it start again); None
        when only keys at their cap held jobs back (they start when active jobs end)."""
        if self.rate is not None and (self.rate_held or self.spent_by_rate()):
            return max(0.0, (self.window + 1) * self.per - now)
        return None

    def spent_by_rate(self) -> list[str]:
        """The keys that have used their rate window."""
        return [k for k, n in self.used.items() if self.rate is not None and n >= self.rate]

    def spent(self) -> list[str]:
        """The keys that may start nothing more now: their window used, or at their cap (a
        claim that leaves their jobs out of its candidates was held back by them)."""
        capped = [k for k, n in self.active.items() if self.cap is not None and n >= self.cap]
        return list(dict.fromkeys(self.spent_by_rate() + capped))

    def excluded(self) -> list[str]:
        """The keys whose jobs a claim leaves out of its candidates: ``spent``, and with
        ``fair``, the keys that had their turn in this round."""
        turned = [k for k, n in self.served.items() if n >= self.weights.get(k, 1)]
        return list(dict.fromkeys(self.spent() + turned))

    def next_round(self) -> bool:
        """With ``fair``, once a claim found no more candidates: begin a new round (every key
        may start again) and say whether the claim should look again (some key had its turn
        in the old one; at most once per claim)."""
        if not self.fair or self.new_round or not (self.served or self.served_elsewhere):
            return False
        self.served, self.served_elsewhere, self.new_round = {}, False, True
        return True


# -- sequences ------------------------------------------------------------------------------------

SEQUENCE_HOLDS: frozenset[str] = frozenset({JobState.WAITING, JobState.DELAYED, JobState.ACTIVE})
"""A job of a sequence in one of these states holds its place in the sequence."""
DEAD: frozenset[str] = frozenset({JobState.FAILED, JobState.EXPIRED})
"""... and in one of these too, unless it was enqueued with ``SequenceFailure.CONTINUE``."""


def holds_sequence(state: str, on_failure: SequenceFailure) -> bool:
    """Whether a job of a sequence in ``state`` holds its place: it has not ended, or it was
    dead-lettered and holds the sequence until it is retried, cancelled or removed.
    Completed and cancelled jobs (and removed ones) have left it."""
    return state in SEQUENCE_HOLDS or (state in DEAD and on_failure is SequenceFailure.HOLD)


def sequence_head(jobs: Sequence[tuple[str, str, SequenceFailure]]) -> str | None:
    """The one job of a sequence a claim may start, of ``jobs``: (id, state, on_failure) of
    every job of the sequence, in enqueue order. It is the head (the earliest job that holds
    its place, ``holds_sequence``) when it is waiting and no job of the sequence is active;
    else None: the sequence waits for its head (running, delayed, or dead-lettered), or for
    an active job behind it (one started while the head had left the sequence and was then
    retried). A retried job keeps its place in enqueue order."""
    head: tuple[str, str] | None = None
    for job_id, state, on_failure in jobs:
        if state == JobState.ACTIVE:
            return None
        if head is None and holds_sequence(state, on_failure):
            head = (job_id, state)
    return head[0] if head is not None and head[1] == JobState.WAITING else None
