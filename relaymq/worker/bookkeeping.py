"""What a worker notes about its jobs once the backend answered: the jobs it claimed, and each
settled outcome (counted in ``WorkerStats`` and the history, and logged in one line). Events and
metrics are not noted here: the facade (``Instrumented``) reports them for every call."""

from __future__ import annotations

import logging

from relaymq.job import Job
from relaymq.records.store import OUTCOME_WORDS, Outcome, Settle
from relaymq.worker.history import History
from relaymq.worker.running import RunningJob
from relaymq.worker.stats import Counts

log = logging.getLogger("relaymq.worker")

"""The ``WorkerStats`` field each applied outcome counts in."""


class Bookkeeping:
    def __init__(self, counts: Counts, history: History) -> None:
        self.counts = counts
        self.history = history

    def claimed(self, n: int) -> None:
        self.counts.add("claimed", n)

    def settled(self, r: RunningJob, s: Settle, applied: bool) -> None:
        """The backend answered ``r``'s settle: ``applied``, or refused as a lost claim."""
        job = r.job
        if not applied and s.outcome is Outcome.CANCEL:  # cancelling ended the claim itself
            self.counts.add("cancelled")
            log.warning("%s cancelled by request", where(job), extra=r.log_extra)
            return
        if not applied:
            self.counts.add("lost")
            lost = "%s: the claim (token %s) was lost; outcome %s dropped"
            log.warning(lost, where(job), r.claim.token, s.outcome.value, extra=r.log_extra)
            return
        self.counts.add(OUTCOME_WORDS[s.outcome])
        self.history.count(job, s)
        if s.outcome is Outcome.COMPLETE:  # the common case: nothing formatted unless logged
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s completed", where(job), extra=r.log_extra)
            return
        at, extra = where(job), r.log_extra
        error = s.error or ""
        summary = error.strip().splitlines()[-1] if error.strip() else ""
        if s.outcome is Outcome.RETRY:
            log.warning("%s failed; retrying in %.1fs: %s", at, s.delay, summary, extra=extra)
        elif s.outcome is Outcome.FAIL:
            log.error("%s failed for good (into the DLQ): %s", at, error, extra=extra)
        elif s.outcome is Outcome.EXPIRE:
            log.warning("%s %s", at, error, extra=extra)
        elif s.outcome is Outcome.CANCEL:
            log.warning("%s cancelled: %s", at, error, extra=extra)
        else:
            log.info("%s released: it runs again at once", at, extra=extra)


def where(job: Job) -> str:
    """How log lines about one attempt name it."""
    return f"job {job.queue}/{job.id} ({job.task}, attempt {job.attempts})"
