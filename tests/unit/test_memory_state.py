"""The reference backend's queue state: the FIFO allocator and the stale-entry rule."""

from __future__ import annotations

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
    row = Row.of(record)
    frozen = row.freeze()
    assert frozen == record and type(frozen) is Job and frozen is not record
    row.token = 9  # a later change of the row never shows through a frozen copy
    assert frozen.token == 2
