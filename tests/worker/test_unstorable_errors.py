"""A handler's error that a backend cannot store as it is (RELIABILITY: "NUL characters, lone
surrogates: round-trip exactly or rejected, the same on every backend"; "an exception that
cannot be serialised: job failed ..., not stuck"). PostgreSQL refuses a NUL in text, and no
backend can encode a lone surrogate as UTF-8, so such an error once made the settle fail on
every try and left the job active. The worker escapes both before the settle, the same way on
every backend: the job ends failed, its error readable. Every backend."""

from __future__ import annotations

import pytest

from relaymq import JobFailedError, JobState, Queue, task
from tests.worker.conftest import RunWorker


@task(queue="tests", retries=0)
async def raise_text(message: str) -> None:
    raise ValueError(message.replace("NUL", "\x00").replace("SURROGATE", "\udcff"))


@task(queue="tests", retries=0)
def raise_text_in_thread(message: str) -> None:
    """A plain handler: its exception comes back from the thread pool."""
    raise ValueError(message.replace("NUL", "\x00").replace("SURROGATE", "\udcff"))


@pytest.mark.parametrize("handler", [raise_text, raise_text_in_thread], ids=["async", "thread"])
async def test_an_error_with_a_nul_or_a_lone_surrogate_fails_the_job_readably(
    queue: Queue, run_worker: RunWorker, handler: object
) -> None:
    assert handler is raise_text or handler is raise_text_in_thread
    async with run_worker():
        nul = await queue.add(handler.call("bad NUL byte"))
        lone = await queue.add(handler.call("bad SURROGATE half"))
        both = await queue.add(handler.call("NUL and SURROGATE"))
        for job, stored in [
            (nul, r"ValueError: bad \x00 byte"),
            (lone, r"ValueError: bad \udcff half"),
            (both, r"ValueError: \x00 and \udcff"),
        ]:
            with pytest.raises(JobFailedError) as raised:
                await job.result(timeout=10)
            assert stored in str(raised.value)
            ended = await job.job()
            assert ended.state is JobState.FAILED and ended.error is not None
            assert stored in ended.error and "Traceback" in ended.error
            assert "\x00" not in ended.error and "\udcff" not in ended.error
        counts = await queue.counts()
    assert (counts[JobState.FAILED], counts[JobState.ACTIVE]) == (3, 0)
