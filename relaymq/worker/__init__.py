"""The worker: ``Worker`` runs jobs; see ``relaymq.worker.worker`` for how it is put together."""

from relaymq.worker.worker import Worker, WorkerStats

__all__ = ["Worker", "WorkerStats"]
