"""``relaymq.testing.drain``: users' tests run a queue's jobs in-process until nothing is left,
on every backend."""

from __future__ import annotations

import pytest

from relaymq import Queue
from relaymq.backends.base import Backend
from relaymq.testing import drain
from tests import tasks
from tests.support.jobs import queue_name
from tests.worker.conftest import FAST


async def test_drain_runs_every_job_and_reports_the_failures(live: Backend) -> None:
    q = queue_name("drain")
    queue = Queue(q, live)
    handles = [await queue.add(tasks.add.call(i, 1)) for i in range(5)]
    doomed = await queue.add(tasks.always_fail.with_options(retries=0).call("drain"))
    later = await queue.add(tasks.add.with_options(delay=3600).call(0, 0))
    done = await drain(live, [q], settings=FAST)
    assert (done.completed, done.failed, done.delayed) == (5, 1, 1)
    assert [await h.result(timeout=1) for h in handles] == [1, 2, 3, 4, 5]
    assert "drain always fails" in done.errors[doomed.id]
    assert (await later.job()).state.value == "delayed"


async def test_drain_says_what_is_left_when_it_runs_out_of_time(live: Backend) -> None:
    q = queue_name("drain-slow")
    await Queue(q, live).add(tasks.add.with_options(delay=3600).call(1, 1))
    with pytest.raises(TimeoutError, match=f"1 delayed in {q}"):
        await drain(live, [q], within=0.3, wait_for_delayed=True, settings=FAST)
