"""One attempt, decided without a backend: expire, cancel, unknown task, bad payload, retry or
fail, timeout, unserialisable result, and the stored error description."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from relaymq.errors import BackendUnavailableError
from relaymq.job import MAX_ERROR_CHARS, Job, JobState, describe
from relaymq.records.store import Outcome
from relaymq.serializers import DEFAULT_SERIALIZER
from relaymq.worker.execution import Execution, failure
from relaymq.worker.running import RunningJob, StopReason
from relaymq.worker.threads import ThreadPool
from tests import tasks
from tests.support.waiting import poll_until

NOW = 1_800_000_000.0


def claimed(task: str, payload: bytes = b'{"args":[1,2],"kwargs":{}}', **fields: Any) -> Job:
    base: dict[str, Any] = {"created_at": NOW, "attempts": 1, "token": 3, "claimed_at": NOW}
    return Job("q", "j1", task, payload, JobState.ACTIVE, **{**base, **fields})


def execution(held: bool = True, fresh_for: float = 60.0) -> tuple[Execution, list[Any]]:
    asked: list[Any] = []

    async def still_held(r: RunningJob) -> bool:
        asked.append(r.job.id)
        if not held:
            r.stop(StopReason.LOST, interrupt=False)
        return held

    return Execution(DEFAULT_SERIALIZER, still_held, lambda r, v: None, fresh_for), asked


async def run(job: Job, **kw: Any) -> Any:
    ex, _ = execution(**kw)
    return await ex.run(RunningJob(job, job.claim), NOW)


async def test_a_returned_value_completes_with_the_serialized_result() -> None:
    settle = await run(claimed(tasks.add.name))
    assert (settle.outcome, settle.result, settle.claim.token) == (Outcome.COMPLETE, b"3", 3)


async def test_an_expired_job_is_expired_and_never_run() -> None:
    k = "exec-expired"
    job = claimed(
        tasks.record_order.name,
        f'{{"args":["{k}","x"],"kwargs":{{}}}}'.encode(),
        ttl=5.0,
        created_at=NOW - 6,
    )
    settle = await run(job)
    assert settle.outcome is Outcome.EXPIRE and "ttl of 5.0s" in settle.error
    assert k not in tasks.ORDER


@pytest.mark.parametrize(
    ("reason", "outcome"),
    [
        (StopReason.CANCELLED, Outcome.CANCEL),
        (StopReason.SHUTDOWN, Outcome.RELEASE),
        (StopReason.LOST, None),
    ],
)
async def test_a_job_stopped_before_it_starts_never_runs(
    reason: StopReason, outcome: Outcome | None
) -> None:
    k = f"exec-stopped-{reason.value}"
    job = claimed(tasks.record_order.name, f'{{"args":["{k}","x"],"kwargs":{{}}}}'.encode())
    r = RunningJob(job, job.claim)
    r.stop(reason)
    ex, _ = execution()
    settle = await ex.run(r, NOW)
    assert (settle.outcome if settle else None) is outcome
    assert k not in tasks.ORDER


async def test_an_old_claim_is_checked_before_the_handler_and_a_lost_one_never_runs() -> None:
    k = "exec-lost"
    job = claimed(tasks.record_order.name, f'{{"args":["{k}","x"],"kwargs":{{}}}}'.encode())
    ex, asked = execution(held=False, fresh_for=0.0)  # every claim counts as old
    assert await ex.run(RunningJob(job, job.claim), NOW) is None  # lost: write nothing
    assert asked == ["j1"] and k not in tasks.ORDER


async def test_a_fresh_claim_starts_without_a_round_trip() -> None:
    job = claimed(tasks.add.name)
    ex, asked = execution(fresh_for=60.0)
    assert (await ex.run(RunningJob(job, job.claim), NOW)).outcome is Outcome.COMPLETE
    assert asked == []


async def test_an_unknown_task_is_retried_with_backoff_then_fails_naming_it() -> None:
    first = await run(claimed("tests.nowhere:ghost", attempts=1, max_attempts=5))
    assert first.outcome is Outcome.RETRY and first.delay >= 1.0  # the default backoff
    assert "tests.nowhere:ghost" in first.error and "another worker" in first.error
    last = await run(claimed("tests.nowhere:ghost", attempts=5, max_attempts=5))
    assert last.outcome is Outcome.FAIL and "tests.nowhere:ghost" in last.error
    assert "__main__" not in last.error


async def test_an_unknown_main_task_says_to_define_it_in_an_importable_module() -> None:
    settle = await run(claimed("__main__:ghost"))
    assert settle.outcome is Outcome.FAIL and "'__main__:ghost'" in settle.error
    assert "importable module" in settle.error and "@task(name=...)" in settle.error


async def test_a_plain_handler_past_its_timeout_is_settled_only_once_it_returned() -> None:
    k = "exec-overrun"
    job = claimed(
        tasks.overrun_timeout.name,
        f'{{"args":["{k}",0.4],"kwargs":{{}}}}'.encode(),
        timeout=0.1,
        max_attempts=2,
    )
    r = RunningJob(job, job.claim)
    settle = await execution()[0].run(r, NOW)
    assert tasks.SPANS[k][-1][1] == "end"  # the thread had returned before the outcome
    assert r.thread is not None and r.thread.done()
    assert settle is not None and settle.outcome is Outcome.RETRY
    assert "overran its timeout of 0.1s" in settle.error


async def test_an_undecodable_payload_fails_with_the_reason() -> None:
    settle = await run(claimed(tasks.add.name, b"\xff{not json"))
    assert settle.outcome is Outcome.FAIL and "payload" in settle.error


async def test_an_exception_retries_while_attempts_remain_then_fails() -> None:
    k = "exec-retry"
    payload = f'{{"args":["{k}"],"kwargs":{{}}}}'.encode()
    first = await run(claimed(tasks.always_fail.name, payload, attempts=1, max_attempts=2))
    assert (first.outcome, first.delay) == (Outcome.RETRY, 0.01)  # always_fail: backoff=0.01
    assert "ValueError" in first.error and "always fails" in first.error
    last = await run(claimed(tasks.always_fail.name, payload, attempts=2, max_attempts=2))
    assert last.outcome is Outcome.FAIL and "always fails" in last.error


async def test_a_timeout_is_a_failed_attempt() -> None:
    settle = await run(
        claimed(tasks.too_slow.name, b'{"args":["exec-slow"],"kwargs":{}}', timeout=0.05)
    )
    assert settle.outcome is Outcome.FAIL and "timed out after 0.05s" in settle.error


async def test_an_unserialisable_result_fails_with_the_reason() -> None:
    settle = await run(claimed(tasks.bad_result.name, b'{"args":["exec-bad"],"kwargs":{}}'))
    assert settle.outcome is Outcome.FAIL and "cannot be serialized" in settle.error


async def test_a_cancelled_handler_acknowledges_the_cancellation() -> None:
    k = "exec-cancel"
    job = claimed(tasks.wait_for_gate.name, f'{{"args":["{k}"],"kwargs":{{}}}}'.encode())
    r = RunningJob(job, job.claim)
    ex, _ = execution()
    r.task = asyncio.create_task(ex.run(r, NOW))
    async with asyncio.timeout(5):  # the handler starting
        await tasks.started(k).wait()
    r.stop(StopReason.CANCELLED)
    settle = await r.task
    assert settle is not None and settle.outcome is Outcome.CANCEL


def test_failure_uses_the_backoff_of_the_attempt() -> None:
    job = claimed(tasks.add.name, attempts=3, max_attempts=5)
    assert failure(job, lambda attempt: attempt * 10.0, "boom").delay == 30.0


def test_the_error_description_is_trimmed_and_keeps_both_ends() -> None:
    try:
        raise RuntimeError("start " + "x" * 10_000 + " end")
    except RuntimeError as e:
        text = describe(e)
    assert len(text) <= MAX_ERROR_CHARS and text.startswith("Traceback") and "end" in text


def test_an_unprintable_exception_is_still_described() -> None:
    class Nasty(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert "Nasty" in describe(Nasty())


async def test_a_start_check_that_cannot_reach_the_backend_releases_the_job() -> None:
    k = "exec-unreachable"
    job = claimed(tasks.record_order.name, f'{{"args":["{k}","x"],"kwargs":{{}}}}'.encode())

    async def unreachable(r: RunningJob) -> bool:
        raise BackendUnavailableError("no server")

    ex = Execution(DEFAULT_SERIALIZER, unreachable, lambda r, v: None, fresh_for=0.0)
    settle = await ex.run(RunningJob(job, job.claim), NOW)
    assert settle is not None and settle.outcome is Outcome.RELEASE  # runs again, not held
    assert k not in tasks.ORDER


async def test_a_task_module_that_raises_on_import_fails_the_job_with_the_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "exec_broken_tasks.py").write_text("raise RuntimeError('broken at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    job = claimed("exec_broken_tasks:anything", max_attempts=5)
    ex = Execution(
        DEFAULT_SERIALIZER,
        lambda r: asyncio.sleep(0, True),
        lambda r, v: None,
        60.0,
        import_prefixes=("exec_broken_tasks",),
    )  # an opted-in module
    settle = await ex.run(RunningJob(job, job.claim), NOW)
    assert settle is not None
    assert settle.outcome is Outcome.FAIL and "broken at import" in settle.error


async def test_a_serializer_raising_its_own_error_fails_the_job() -> None:
    class Picky:
        def dumps(self, value: Any) -> bytes:
            raise OverflowError("too big for me")

        def loads(self, data: bytes) -> Any:
            return DEFAULT_SERIALIZER.loads(data)

    job = claimed(tasks.add.name)
    ex = Execution(Picky(), lambda r: asyncio.sleep(0, True), lambda r, v: None, 60.0)
    settle = await ex.run(RunningJob(job, job.claim), NOW)
    assert settle is not None and settle.outcome is Outcome.FAIL
    assert settle.error is not None and "too big for me" in settle.error


async def test_a_plain_job_cancelled_while_it_waits_for_a_thread_never_runs() -> None:
    """The check right before a plain handler happens on its thread, after the wait for one."""
    key = "exec-thread-queue"
    pool = ThreadPool(1)
    ex = Execution(DEFAULT_SERIALIZER, _never_asked, lambda r, v: None, pool=pool)
    try:
        blocker = claimed(tasks.block_thread.name, f'{{"args":["{key}-a"],"kwargs":{{}}}}'.encode())
        queued = claimed(
            tasks.block_thread.name, f'{{"args":["{key}-b"],"kwargs":{{}}}}'.encode(), token=4
        )
        first = asyncio.create_task(ex.run(RunningJob(blocker, blocker.claim), NOW))
        await asyncio.to_thread(tasks.thread_started(f"{key}-a").wait, 5)
        r = RunningJob(queued, queued.claim)
        second = asyncio.create_task(ex.run(r, NOW))
        await poll_until(lambda: r.thread is not None, "the second job to queue for the thread")
        r.stop(StopReason.CANCELLED)  # what a heartbeat does when it hears of the cancel
        tasks.thread_gate(f"{key}-a").set()
        settle = await asyncio.wait_for(second, 5)
        assert settle is not None and settle.outcome is Outcome.CANCEL
        assert tasks.LEDGER[f"{key}-b"] == 0 and tasks.LEDGER[f"{key}-a"] == 1
        assert (await first).outcome is Outcome.COMPLETE
    finally:
        pool.shutdown(wait=False)


async def test_an_old_plain_claim_is_checked_on_its_thread_and_a_lost_one_never_runs() -> None:
    key = "exec-thread-lost"
    job = claimed(tasks.block_thread.name, f'{{"args":["{key}"],"kwargs":{{}}}}'.encode())
    ex, asked = execution(held=False, fresh_for=0.0)
    assert await ex.run(RunningJob(job, job.claim), NOW) is None  # lost: write nothing
    assert asked == ["j1"] and tasks.LEDGER[key] == 0


async def test_a_plain_start_check_that_cannot_reach_the_backend_releases_the_job() -> None:
    key = "exec-thread-unreachable"

    async def unreachable(r: RunningJob) -> bool:
        raise BackendUnavailableError("down")

    job = claimed(tasks.block_thread.name, f'{{"args":["{key}"],"kwargs":{{}}}}'.encode())
    ex = Execution(DEFAULT_SERIALIZER, unreachable, lambda r, v: None, fresh_for=0.0)
    settle = await ex.run(RunningJob(job, job.claim), NOW)
    assert settle is not None and settle.outcome is Outcome.RELEASE
    assert tasks.LEDGER[key] == 0


async def _never_asked(r: RunningJob) -> bool:
    raise AssertionError("a fresh claim needs no round trip")
