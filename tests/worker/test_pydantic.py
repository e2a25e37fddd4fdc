"""pydantic models as task arguments and results, on every backend: validated at enqueue (a bad
argument stores nothing), models again on the worker, a model result read back as the model."""

from __future__ import annotations

import pytest

from relaymq import Queue
from relaymq.backends.base import Backend
from relaymq.errors import ArgumentValidationError
from relaymq.job import JobState
from tests import pydantic_tasks as pt
from tests.support.jobs import get_job, new_job
from tests.worker.conftest import RunWorker


async def test_models_go_in_and_come_out_as_models(queue: Queue, run_worker: RunWorker) -> None:
    customer = pt.Customer(name="Ada", age=36, addresses=[pt.Address(street="x", zip_code="12345")])
    register = pt.register.with_options(queue=queue.name)
    handle = await queue.add(register.call(customer, note="!"))
    as_dict = await queue.add(register.call({"name": "Bo", "age": 1}))  # type: ignore[arg-type]
    plain = await queue.add(pt.register_plain.with_options(queue=queue.name).call([customer]))
    assert b'"zip_code":"12345"' in (await handle.job()).payload  # stored as JSON
    async with run_worker():
        receipt = await handle.result(timeout=10)
        assert receipt == pt.Receipt(customer="Ada!", count=1) and isinstance(receipt, pt.Receipt)
        assert await as_dict.result(timeout=10) == pt.Receipt(customer="Bo", count=0)
        assert await plain.result(timeout=10) == ["Ada"]


async def test_an_argument_that_does_not_validate_is_refused_at_enqueue(queue: Queue) -> None:
    bad = {"name": "Cy", "age": -1}
    with pytest.raises(ArgumentValidationError, match="argument 'customer' does not validate"):
        await queue.add(pt.register.with_options(queue=queue.name).call(bad))  # type: ignore[arg-type]
    assert sum((await queue.counts()).values()) == 0  # nothing stored


async def test_a_stored_argument_that_no_longer_validates_fails_the_job(
    live: Backend, q: str, run_worker: RunWorker
) -> None:
    payload = b'{"args":[{"name":"Di","age":"old"}],"kwargs":{}}'
    [stored] = await live.enqueue([new_job(q, task=pt.register.name, payload=payload)])
    async with run_worker() as worker:
        await worker.until(lambda s: s.failed == 1, "the job to fail")
    job = await get_job(live, q, stored.id)
    assert job is not None and job.state is JobState.FAILED
    assert "cannot decode the job's payload" in (job.error or "") and "'customer'" in job.error
