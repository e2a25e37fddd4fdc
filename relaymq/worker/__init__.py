"""The worker: ``Worker`` runs jobs; see ``relaymq.worker.worker`` for how it is put together."""

from relaymq.worker.stats import WorkerStats
from relaymq.worker.worker import Worker

__all__ = ["Worker", "WorkerStats"]
