"""Results over ``max_result_bytes`` (issue 28, item 5): the attempt fails with an error naming
the size and the limit, retried by the task's own policy, and the job always ends; it is never
left active with an outcome the backend cannot store (a 100 MB result on MongoDB was refused
three times, stayed active and ran again after recovery). Every backend."""

from __future__ import annotations

import pytest

from relaymq import JobFailedError, JobState, Queue, Settings, task
from relaymq.errors import ConfigError
from tests.worker.conftest import RunWorker


@task(queue="tests", retries=1, backoff=0.01)
async def sized_result(size: int) -> str:
    """A result that serializes to ``size + 2`` bytes (a JSON string)."""
    return "x" * size


async def test_a_result_over_the_limit_fails_naming_size_and_limit(
    queue: Queue, run_worker: RunWorker
) -> None:
    async with run_worker(max_result_bytes=64):
        small = await queue.add(sized_result.call(10))
        big = await queue.add(sized_result.call(100))
        assert await small.result(timeout=10) == "x" * 10
        with pytest.raises(JobFailedError, match="102 bytes") as raised:
            await big.result(timeout=10)
    assert "max_result_bytes=64" in str(raised.value)
    job = await big.job()
    assert job.state is JobState.FAILED and job.result is None
    assert job.attempts == 2  # retried by the task's policy (retries=1), then failed


async def test_a_result_over_the_default_limit_fails_cleanly(
    queue: Queue, run_worker: RunWorker
) -> None:
    limit = Settings().max_result_bytes
    assert limit == 1024 * 1024
    async with run_worker():  # the default limit
        big = await queue.add(sized_result.with_options(retries=0).call(limit))
        with pytest.raises(JobFailedError, match=f"over max_result_bytes={limit}"):
            await big.result(timeout=20)
        assert (await big.job()).result is None
        counts = await queue.counts()
    assert (counts[JobState.FAILED], counts[JobState.ACTIVE]) == (1, 0)


def test_the_setting_has_an_environment_twin_and_is_checked() -> None:
    assert Settings.from_env({"RELAYMQ_MAX_RESULT_BYTES": "4096"}).max_result_bytes == 4096
    with pytest.raises(ConfigError, match="max_result_bytes"):
        Settings(max_result_bytes=0)
