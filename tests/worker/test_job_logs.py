"""Every log line made inside a job carries the job's queue, id, task and attempt: the worker's
own and the handler's, on the event loop and in a plain function's thread; the command's log
formats print them."""

from __future__ import annotations

import logging

import orjson
import pytest

from relaymq import JobFailedError, Queue
from relaymq.cli.logs import JSONFormatter, PlainFormatter
from tests.support import observed_tasks as observed
from tests.worker.conftest import RunWorker


def handler_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "tests.handler"]


async def test_a_handler_log_line_carries_the_job_fields_async_and_threaded(
    queue: Queue, run_worker: RunWorker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tests.handler")
    async with run_worker():
        on_loop = await queue.add(observed.log_async.call("a"))
        in_thread = await queue.add(observed.log_thread.call("t"))
        assert await on_loop.result(timeout=10) == "a"
        assert await in_thread.result(timeout=10) == "t"
    fields = {
        r.getMessage(): (r.queue, r.job_id, r.task, r.attempt, r.threadName)  # type: ignore[attr-defined]
        for r in handler_lines(caplog)
    }
    assert fields.keys() == {"async handler says a", "threaded handler says t"}
    q = queue.name
    assert fields["async handler says a"][:4] == (q, on_loop.id, observed.log_async.name, 1)
    assert fields["threaded handler says t"][:4] == (q, in_thread.id, observed.log_thread.name, 1)
    assert fields["threaded handler says t"][4].startswith("relaymq-handler")


async def test_each_attempt_logs_its_own_attempt_number(
    queue: Queue, run_worker: RunWorker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    handle = await queue.add(observed.log_and_fail.call("k"))  # retries=1: two attempts
    async with run_worker():
        with pytest.raises(JobFailedError):
            await handle.result(timeout=10)
    mine = [(r.attempt, r.getMessage()) for r in handler_lines(caplog)]  # type: ignore[attr-defined]
    assert mine == [(1, "failing attempt for k"), (2, "failing attempt for k")]
    started = [
        r
        for r in caplog.records
        if r.name == "relaymq.worker"  # a driver's lines carry the job's fields too
        and getattr(r, "job_id", None) == handle.id
        and "started" in r.getMessage()
    ]
    assert [r.attempt for r in started] == [1, 2]  # type: ignore[attr-defined]


async def test_lines_outside_a_job_carry_no_job_fields(
    queue: Queue, run_worker: RunWorker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tests.handler")
    async with run_worker():
        await (await queue.add(observed.log_async.call("in"))).result(timeout=10)
        logging.getLogger("tests.handler").info("beside the worker")
    [outside] = [r for r in handler_lines(caplog) if r.getMessage() == "beside the worker"]
    assert not hasattr(outside, "job_id") and not hasattr(outside, "queue")


async def test_the_log_formats_print_the_job_fields(
    queue: Queue, run_worker: RunWorker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tests.handler")
    async with run_worker():
        handle = await queue.add(observed.log_thread.call("f"))
        await handle.result(timeout=10)
    [record] = handler_lines(caplog)
    entry = orjson.loads(JSONFormatter().format(record))
    assert {k: entry[k] for k in ("message", "queue", "job_id", "task", "attempt")} == {
        "message": "threaded handler says f",
        "queue": queue.name,
        "job_id": handle.id,
        "task": observed.log_thread.name,
        "attempt": 1,
    }
    plain = PlainFormatter().format(record)
    assert plain.endswith(
        f"threaded handler says f [queue={queue.name} job_id={handle.id} "
        f"task={observed.log_thread.name} attempt=1]"
    )
