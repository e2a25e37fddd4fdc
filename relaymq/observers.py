"""Observers: what the instrumented facade tells about what the core does with jobs, and the
observers installed on one app (``Hooks``; ``App.observe``). ``relaymq.metrics`` and
``relaymq.tracing`` are observers. With none installed, each hook point costs one attribute
read."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence

from relaymq.job import Job, NewJob
from relaymq.records.store import Enqueued, Recovered, Settle

observer_log = logging.getLogger("relaymq.observers")

UNOBSERVED = contextlib.nullcontext()
"""The shared no-op context of a hook point no observer wants."""


class Observer:
    """Told what the core does with jobs. Every hook here does nothing; an observer overrides
    those it needs. Hooks run on the worker's hot path: keep them cheap; they must not raise.
    """

    def call(self, op: str) -> contextlib.AbstractContextManager[object] | None:
        """A context around one backend call named ``op``; None: not interested."""
        return None

    def enqueuing(self, jobs: Sequence[NewJob]) -> Sequence[NewJob]:
        """Before ``jobs`` are stored: the jobs to store instead (tracing stamps each with its
        ``traceparent``); the very list returned is the one ``enqueued`` receives."""
        return jobs

    def enqueued(
        self,
        jobs: Sequence[NewJob],
        answers: Sequence[Enqueued] | None,
        error: BaseException | None,
    ) -> None:
        """``jobs`` were stored (``answers``), or the backend refused them (``error``)."""

    def claimed(self, jobs: Sequence[Job]) -> None:
        """A worker claimed ``jobs`` (records as the claim returned them)."""

    def attempt(self, job: Job) -> contextlib.AbstractContextManager[object] | None:
        """A context around one attempt of ``job`` (the handler runs inside, in the job's own
        task and, for a plain function, in a copy of its context); None: not interested."""
        return None

    def handler_raised(self, job: Job, error: BaseException) -> None:
        """The handler of ``job`` raised ``error`` (inside ``attempt``)."""

    def attempt_ended(self, job: Job, settle: Settle | None, ran_for: float | None) -> None:
        """The attempt decided ``settle`` (None: the claim was lost); ``ran_for``: seconds the
        handler ran (None: it never started). Called inside ``attempt``."""

    def settled(self, job: Job, settle: Settle, applied: bool) -> None:
        """The backend stored ``settle`` (``applied``), or refused it: the claim was lost."""

    def claim_lost(self, job: Job) -> None:
        """A heartbeat or the fenced start check found ``job``'s claim lost."""

    def recovered(self, queue: str, found: Recovered) -> None:
        """One stalled-recovery pass over ``queue`` did ``found``."""


class Hooks:
    """The observers installed on one app (``App.observe``): a tuple replaced (never changed)
    on each install. With none, each hook point costs one attribute read."""

    def __init__(self) -> None:
        self.observers: tuple[Observer, ...] = ()
        self._lock = threading.Lock()

    def add(self, observer: Observer) -> None:
        """Install ``observer`` (again: no change)."""
        with self._lock:
            if observer not in self.observers:
                self.observers = (*self.observers, observer)

    def remove(self, observer: Observer) -> None:
        """Remove ``observer`` (not installed: no change)."""
        with self._lock:
            self.observers = tuple(o for o in self.observers if o is not observer)

    def around(
        self, make: Callable[[Observer], contextlib.AbstractContextManager[object] | None]
    ) -> contextlib.AbstractContextManager[object]:
        """The contexts the installed observers want around something (``make(observer)``:
        its ``call`` or ``attempt``), nested; a shared no-op when none wants one."""
        observers = self.observers
        if not observers:
            return UNOBSERVED
        contexts = []
        for o in observers:
            try:
                if (c := make(o)) is not None:
                    contexts.append(c)
            except Exception:
                observer_log.exception("observer %r failed", o)
        if not contexts:
            return UNOBSERVED
        return contexts[0] if len(contexts) == 1 else _around(contexts)

    def tell(self, hook: Callable[[Observer], object]) -> None:
        """Run ``hook(observer)`` for every installed observer: one that raises is logged,
        never raised into the core (a metric must not fail a job)."""
        for o in self.observers:
            try:
                hook(o)
            except Exception:
                observer_log.exception("observer %r failed", o)


@contextlib.contextmanager
def _around(contexts: list[contextlib.AbstractContextManager[object]]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for c in contexts:
            stack.enter_context(c)
        yield
