"""The reference backend's queue state: the FIFO allocator and the stale-entry rule."""

from __future__ import annotations

from dataclasses import fields

from relaymq.backends.memory.state import QueueState, Row
from relaymq.job import Job, JobState


def job(job_id: str, priority: int = 0) -> Row:
    return Row("q", job_id, "t", b"{}", JobState.WAITING, priority=priority)


def test_every_way_into_waiting_allocates_the_next_sequence() -> None:
    q = QueueState()
    a = q.add(job("a"), None)
    b = q.add(job("b"), run_at=10.0)
    assert (a.seq, b.seq, b.state) == (1, 2, JobState.DELAYED)
    [promoted] = q.promote_due(now=10.0)
    assert (promoted.id, promoted.seq, promoted.state) == ("b", 3, JobState.WAITING)


def test_claim_order_is_priority_then_fifo_and_release_keeps_its_place() -> None:
    q = QueueState()
    for job_id, priority in [("low", 9), ("a", 0), ("b", 0), ("c", 0)]:
        q.add(job(job_id, priority), None)
    first = q.pop_waiting()
    assert first is not None and first.id == "a"
    active = q.move(first, JobState.ACTIVE)
    q.make_waiting(active, keep_seq=True)  # released: back to the front of its priority
    assert [q.pop_waiting().id for _ in range(4)] == ["a", "b", "c", "low"]  # type: ignore[union-attr]
    assert q.pop_waiting() is None


def test_stale_heap_entries_are_skipped() -> None:
    q = QueueState()
    a = q.add(job("a"), None)
    q.add(job("b"), None)
    q.make_waiting(a)  # re-queued: its first entry is stale now
    q.remove("b")  # removed: its entry points at nothing
    assert [j.id for j in q.waiting_page(0, 10)] == ["a"]
    assert q.pop_waiting().id == "a" and q.pop_waiting() is None  # type: ignore[union-attr]


def test_state_index_follows_every_change() -> None:
    q = QueueState()
    a = q.add(job("a"), None)
    q.finish(a, JobState.COMPLETED, now=1.0)
    assert {s: len(ids) for s, ids in q.by_state.items() if ids} == {JobState.COMPLETED: 1}
    q.remove("a")
    assert not any(q.by_state.values()) and q.jobs == {}


def test_a_row_has_every_field_of_job_and_freezes_into_an_equal_job() -> None:
    record = Job("q", "a", "t", b"{}", JobState.ACTIVE, priority=3, token=2, extra={"k": "v"})
    row = Row(*(getattr(record, f.name) for f in fields(Job)))  # Row has Job's fields, in order
    frozen = row.freeze()
    assert frozen == record and type(frozen) is Job and frozen is not record
    row.token = 9  # a later change of the row never shows through a frozen copy
    assert frozen.token == 2
    assert [f.name for f in fields(Row)] == [f.name for f in fields(Job)]
    assert job("b").freeze() == Job("q", "b", "t", b"{}", JobState.WAITING)  # same defaults


def test_a_job_claimed_without_a_pop_and_released_is_listed_once() -> None:
    """A delivery store activates jobs by id, leaving their heap entry; a release pushes the same
    (priority, sequence) again. The listing follows the state index, not the heap."""
    q = QueueState()
    a = q.add(job("a"), None)
    q.add(job("b"), None)
    q.make_waiting(q.activate(a, "w", now=1.0), keep_seq=True)
    assert [j.id for j in q.waiting_page(0, 10)] == ["a", "b"]
    claimed = []
    while (next_job := q.pop_waiting()) is not None:
        claimed.append(q.activate(next_job, "w", now=2.0).id)
    assert claimed == ["a", "b"]


def test_a_heap_never_popped_stays_bounded() -> None:
    q = QueueState()
    a = q.add(job("a"), None)
    for n in range(1000):  # delivered, released, delivered, ... (a delivery store's cycle)
        q.make_waiting(q.activate(a, "w", now=float(n)), keep_seq=True)
    assert len(q._waiting) <= 2 * len(q.by_state[JobState.WAITING]) + 64
    assert [j.id for j in q.waiting_page(0, 10)] == ["a"]
