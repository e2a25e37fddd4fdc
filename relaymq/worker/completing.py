"""``JobContext.complete_in``: a handler completes its job in its own transaction.

The completion is the backend's fenced settle, written on the handler's connection
(``Instrumented.complete_in``); once it is written, the worker stops renewing the claim (the
transaction holds the job) and, when the handler has returned, reads the job once to learn
whether that transaction committed (``committed``): then it writes nothing more; if not, the
attempt failed.
"""

from __future__ import annotations

import time
from typing import Any

from relaymq.errors import ClaimLostError, SerializationError
from relaymq.instrumented import Instrumented
from relaymq.job import Job, JobState
from relaymq.models import Models
from relaymq.records.store import Outcome, Settle
from relaymq.serializers import Serializer
from relaymq.worker.running import RunningJob

NOT_COMMITTED = "complete_in was called, but its transaction did not commit"


class CompleteIn:
    """The ``Completer`` of one attempt's ``JobContext``."""

    def __init__(
        self,
        ops: Instrumented,
        r: RunningJob,
        serializer: Serializer,
        models: Models | None,
        max_result_bytes: int,
        keep: int,
    ) -> None:
        self.ops = ops
        self.keep = keep
        """Attempts the job's history keeps (``Settings.attempt_history``)."""
        self.began = time.monotonic()
        """About when the handler started (this is made right before it)."""
        self.r = r
        self.serializer = serializer
        self.models = models
        self.max_result_bytes = max_result_bytes

    async def complete(self, connection: object, result: Any) -> None:
        settle = self._settle(result)
        self._applied(await self.ops.complete_in(connection, self.r.job, settle), settle)

    def complete_sync(self, connection: object, result: Any) -> None:
        settle = self._settle(result)
        self._applied(self.ops.complete_in_sync(connection, self.r.job, settle), settle)

    def _settle(self, result: Any) -> Settle:
        data = self.serializer.dumps(
            result if self.models is None else self.models.dump_result(result)
        )
        if len(data) > self.max_result_bytes:
            raise SerializationError(
                f"result too large: {len(data)} bytes, over max_result_bytes="
                f"{self.max_result_bytes}"
            )
        return Settle(
            self.r.claim,
            Outcome.COMPLETE,
            result=data,
            ran_for=time.monotonic() - self.began,
            keep=self.keep,
        )

    def _applied(self, applied: bool, settle: Settle) -> None:
        if not applied:
            job = self.r.job
            raise ClaimLostError(
                f"job {job.queue}/{job.id} (attempt {job.attempts}) no longer belongs to this "
                "attempt (recovered, cancelled or removed): it was not completed; let this "
                "transaction roll back"
            )
        self.r.completed_in = settle


def committed(r: RunningJob, job: Job | None) -> bool | None:
    """Whether the transaction of ``r``'s ``complete_in`` committed, from the job as read once
    the handler returned: True (completed by this attempt), False (still this attempt's:
    rolled back), None (the claim was lost meanwhile)."""
    if job is None or job.token != r.claim.token:
        return None
    if job.state is JobState.COMPLETED:
        return True
    return False if job.state is JobState.ACTIVE else None
