"""Flows and ``depends_on`` through the producer API and a running worker, on every backend: a
parent runs after its children, nested; it sees their results; the failure policy decides what
a child that did not complete does to it; bad dependencies are refused with nothing stored."""

from __future__ import annotations

from typing import Any

import pytest

from relaymq import ConfigError, Flow, JobFailedError, JobState, Queue
from tests import tasks
from tests.worker.conftest import RunWorker


def on(queue: Queue, t: Any) -> Any:
    return t.with_options(queue=queue.name)


async def test_a_parent_runs_after_its_children_and_sees_their_results(
    queue: Queue, run_worker: RunWorker
) -> None:
    add, gather = on(queue, tasks.add), on(queue, tasks.gather)
    inner = Flow(gather.call("inner"), [add.call(1, 2), add.call(3, 4)])
    handles = await queue.add_flow(Flow(gather.call("top"), [inner, add.call(10, 20)]))
    a, b, inner_h, c, top = handles
    assert [(await h.job()).state for h in handles] == [
        JobState.WAITING,
        JobState.WAITING,
        JobState.BLOCKED,
        JobState.WAITING,
        JobState.BLOCKED,
    ]
    async with run_worker(concurrency=4):
        result = await top.result(timeout=20)
    inner_result = {"label": "inner", "results": {a.id: 3, b.id: 7}, "failed": {}}
    assert result == {"label": "top", "results": {inner_h.id: inner_result, c.id: 30}, "failed": {}}
    parent = await top.job()
    assert parent.depends_on == (inner_h.id, c.id)
    # Each parent started after its children ended.
    jobs = {h.id: await h.job() for h in handles}
    for parent_id, children in ((inner_h.id, (a.id, b.id)), (top.id, (inner_h.id, c.id))):
        started = jobs[parent_id].claimed_at or 0.0
        assert all((jobs[c].finished_at or 0.0) <= started for c in children)


@pytest.mark.parametrize("policy", ["fail", "ignore", "include"])
async def test_a_child_that_fails_meets_the_flows_policy(
    queue: Queue, run_worker: RunWorker, policy: str
) -> None:
    good, bad = on(queue, tasks.add).call(1, 1), on(queue, tasks.always_fail).call("x")
    ok_h, bad_h, top = await queue.add_flow(
        Flow(on(queue, tasks.gather).call("top"), [good, bad], on_failure=policy)
    )
    async with run_worker():
        if policy == "fail":
            with pytest.raises(JobFailedError, match=f"dependency {bad_h.id} ended failed"):
                await top.result(timeout=20)
            return
        result = await top.result(timeout=20)
    assert result["results"] == {ok_h.id: 2}
    if policy == "include":
        assert result["failed"] == {bad_h.id: "failed: ValueError: x always fails"}
    else:
        assert result["failed"] == {}


async def test_depends_on_an_existing_job_by_handle_or_id(
    queue: Queue, run_worker: RunWorker
) -> None:
    first = await queue.add(on(queue, tasks.add).call(2, 3))
    gather = on(queue, tasks.gather)
    by_handle = await queue.add(gather.with_options(depends_on=[first]).call("h"))
    by_id = await queue.add(gather.with_options(depends_on=[first.id]).call("i"))
    assert (await by_handle.job()).state is JobState.BLOCKED
    async with run_worker():
        assert (await by_handle.result(timeout=20))["results"] == {first.id: 5}
        assert (await by_id.result(timeout=20))["results"] == {first.id: 5}


async def test_bad_dependencies_are_refused_and_nothing_is_stored(queue: Queue) -> None:
    add = on(queue, tasks.add)
    with pytest.raises(ConfigError, match="depends_on names 'nope': no such job in queue"):
        await queue.add(add.with_options(depends_on=["nope"]).call(1, 1))
    later = add.with_options(job_id="later").call(1, 1)
    first = add.with_options(job_id="first", depends_on=["later"]).call(1, 1)
    with pytest.raises(ConfigError, match="comes after it in the batch"):
        await queue.add_bulk([add.call(0, 0), first, later])
    with pytest.raises(ConfigError, match="depends on itself"):
        await queue.add(add.with_options(job_id="me", depends_on=["me"]).call(1, 1))
    assert sum((await queue.counts()).values()) == 0
    with pytest.raises(ConfigError, match="no delay, throttle or debounce"):
        add.with_options(depends_on=["x"], delay=5)
    with pytest.raises(ConfigError, match="must be 'fail', 'ignore' or 'include'"):
        add.with_options(depends_on=["x"], on_dependency_failure="maybe")
    with pytest.raises(ConfigError, match="a list of job ids or handles"):
        add.with_options(depends_on="x")
    with pytest.raises(ConfigError, match="at least one child"):
        await queue.add_flow(Flow(add.call(1, 1), []))
