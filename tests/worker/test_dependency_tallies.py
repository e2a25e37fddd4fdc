"""A job failed by its dependency counts in the history (the dashboard's chart), as any failed
job does (issue 28, item 14: "a parent failed by its child is missing from the chart"). The
worker counts the outcomes it writes; a dependency failure is written by the backend, in the
atomic step that ended the dependency, so the backend counts it there too, at the minute of
the failure. Every backend."""

from __future__ import annotations

from typing import Any

import pytest

from relaymq import Flow, JobFailedError, JobState, Queue
from relaymq.backends.base import Backend
from relaymq.records.store import Tally
from tests import tasks
from tests.worker.conftest import RunWorker


def on(queue: Queue, t: Any) -> Any:
    return t.with_options(queue=queue.name)


def totals(tallies: list[Tally]) -> tuple[int, int, int]:
    return (
        sum(t.completed for t in tallies),
        sum(t.retried for t in tallies),
        sum(t.failed for t in tallies),
    )


async def test_parents_failed_by_a_failed_child_are_counted_failed(
    queue: Queue, live: Backend, run_worker: RunWorker
) -> None:
    gather, child = on(queue, tasks.gather), on(queue, tasks.always_fail)
    inner = Flow(gather.call("inner"), [child.with_options(retries=0).call("child")])
    _, inner_h, top = await queue.add_flow(Flow(gather.call("top"), [inner]))
    async with run_worker(history_flush_interval=60):  # written at shutdown
        with pytest.raises(JobFailedError, match=f"dependency {inner_h.id} ended failed"):
            await top.result(timeout=20)
    assert (await inner_h.job()).state is JobState.FAILED
    # the child counted by the worker, its parent and grandparent by the backend
    assert totals(await live.tallies(queue.name, 0)) == (0, 0, 3)


async def test_a_parent_failed_by_a_cancelled_child_is_counted_failed(
    queue: Queue, live: Backend
) -> None:
    child, parent = await queue.add_flow(
        Flow(on(queue, tasks.gather).call("parent"), [on(queue, tasks.add).call(1, 2)])
    )
    assert (await live.tallies(queue.name, 0)) == []
    await queue.cancel(child.id)  # an operator's cancel: no worker writes anything
    job = await parent.job()
    assert job.state is JobState.FAILED and job.finished_at is not None
    tallies = await live.tallies(queue.name, 0)
    assert totals(tallies) == (0, 0, 1)  # a cancel is not counted; the parent's failure is
    assert [t.minute for t in tallies] == [int(job.finished_at // 60)]


@pytest.mark.parametrize("ending", ["prune", "obliterate"])
async def test_a_dependency_failures_count_is_pruned_and_obliterated_like_the_others(
    queue: Queue, live: Backend, ending: str
) -> None:
    child, _ = await queue.add_flow(
        Flow(on(queue, tasks.gather).call("parent"), [on(queue, tasks.add).call(1, 2)])
    )
    await queue.cancel(child.id)
    assert totals(await live.tallies(queue.name, 0)) == (0, 0, 1)
    if ending == "prune":
        await live.prune_tallies(2**40)  # every minute before a far future
    else:
        await live.obliterate(queue.name)
    assert await live.tallies(queue.name, 0) == []
