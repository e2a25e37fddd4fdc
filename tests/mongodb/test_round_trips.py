"""Round trips per batch, counted with pymongo's command monitoring (a budget, pinned).

A batch of B jobs costs 2 (enqueue) + 4 (claim from one queue) + 1 (settle) requests, and 1
per heartbeat of all held claims: about 7/B requests per job, whatever B is. A settle also
reads, at most once a second per queue, whether the queue has blocked jobs (flows).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pymongo import monitoring

from relaymq.backends.mongodb import dependencies
from relaymq.records.store import Beat, Outcome, Settle
from relaymq.testing import FakeClock
from tests.conftest import require
from tests.support import case_mongodb
from tests.support.jobs import new_job


class Commands(monitoring.CommandListener):
    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.seen[event.command_name] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def take(self) -> int:
        n = sum(self.seen.values())
        self.seen.clear()
        return n


@pytest.mark.parametrize("batch", [1, 20])
async def test_requests_per_batch_do_not_grow_with_the_batch(
    tmp_path: Path, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    require(case_mongodb.CASE)
    # What a settle read of blocked jobs holds for REFRESH seconds of real time: longer than
    # this test, however loaded the machine (at 1 s, a slow step made a second settle read it).
    monkeypatch.setattr(dependencies, "REFRESH", 600.0)
    commands = Commands()
    clock = FakeClock()
    backend = case_mongodb._TestBackend(
        case_mongodb.url(tmp_path), clock=clock, event_listeners=[commands]
    )
    await backend.connect()
    case_mongodb._handles[backend.database_name] += 1
    try:
        q = "trips"
        commands.take()
        await backend.enqueue([new_job(q) for _ in range(batch)])
        assert commands.take() == 2  # reserve sequences + insert_many
        jobs = (await backend.claim([q], "w", batch)).jobs
        assert len(jobs) == batch
        assert commands.take() == 4  # pause flags + candidates + update_many + read-back
        await backend.heartbeat([Beat(j.claim) for j in jobs])
        assert commands.take() == 1
        assert (
            await backend.settle([Settle(j.claim, Outcome.COMPLETE) for j in jobs])
            == [True] * batch
        )
        assert commands.take() == 2  # bulk_write + whether the queue has blocked jobs
        await backend.enqueue([new_job(q) for _ in range(batch)])
        jobs = (await backend.claim([q], "w", batch)).jobs
        commands.take()
        await backend.settle([Settle(j.claim, Outcome.COMPLETE) for j in jobs])
        assert commands.take() == 1  # what it read of blocked jobs still holds
        await backend.enqueue([new_job(q) for _ in range(batch)])
        await backend.claim([q], "w", batch)
        clock.advance(60)
        commands.take()
        assert len((await backend.recover_stalled(q, 30, 5)).requeued) == batch
        # jobs in a state nobody knows (corrupt) + scan + blocked jobs to mend + sequences +
        # bulk_write
        assert commands.take() == 5
    finally:
        await backend.close()
