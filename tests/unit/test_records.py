"""The per-job records are plain slotted dataclasses (relaymq.job says why): the ones that were
hashable still are, a Job handed out stays a snapshot of the stored job, and events encode as
before."""

from __future__ import annotations

import orjson

from relaymq import events
from relaymq.backends.memory import InMemoryBackend
from relaymq.job import Claim, JobState
from relaymq.records.store import Enqueued, Outcome, Settle
from tests.support.jobs import get_job, new_job


def test_the_records_that_were_hashable_still_are_and_by_value() -> None:
    claim, same = Claim("q", "a", 3, 1.5), Claim("q", "a", 3, 1.5)
    made_twice = [
        (claim, same),
        (Settle(claim, Outcome.COMPLETE, b"1"), Settle(same, Outcome.COMPLETE, b"1")),
        (new_job("q", "a"), new_job("q", "a")),
        (Enqueued("a", duplicate=True), Enqueued("a", duplicate=True)),
    ]
    for one, other in made_twice:
        assert one == other and hash(one) == hash(other)
        assert len({one, other}) == 1
    assert Claim("q", "a", 4, 1.5) not in {claim}


async def test_a_job_handed_out_does_not_change_with_the_stored_one() -> None:
    backend = InMemoryBackend()
    await backend.enqueue([new_job("q", "a")])
    [claimed] = (await backend.claim(["q"], "w", 1)).jobs
    await backend.settle([Settle(claimed.claim, Outcome.COMPLETE, b"1")])
    assert claimed.state is JobState.ACTIVE and claimed.result is None
    stored = await get_job(backend, "q", "a")
    assert stored is not None and stored.state is JobState.COMPLETED and stored.result == b"1"
    stored.result = b"changed"  # a snapshot: changing it changes nothing stored
    again = await get_job(backend, "q", "a")
    assert again is not None and again.result == b"1"


def test_events_encode_as_orjson_writes_the_dataclass() -> None:
    """``events.encode`` builds dicts for speed: the bytes must stay what the dataclass gives
    (a field added to Event and not to encode fails here)."""
    batch = [
        events.Event(events.JOB_COMPLETED, "q", 1.5, "a", {"attempt": 1}),
        events.Event(events.QUEUE_PAUSED, "q", 2.0),
    ]
    assert events.encode(batch) == orjson.dumps(batch)
    assert events.decode(events.encode(batch)) == batch
