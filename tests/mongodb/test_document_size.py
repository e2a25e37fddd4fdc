"""A document over MongoDB's size limit (issue 28, item 5): the error says so, in words, and
is not reported as an unreadable document (which sent operators looking for corruption)."""

from __future__ import annotations

import pytest
from pymongo.errors import BulkWriteError, OperationFailure

from relaymq.backends.base import Backend
from relaymq.backends.mongodb.errors import translated
from relaymq.errors import BackendError, CorruptRecordError
from relaymq.job import JobState
from relaymq.records.store import Outcome, Settle
from tests.support.jobs import get_job, new_job


async def test_a_result_over_the_document_limit_names_the_limit(backend: Backend) -> None:
    await backend.enqueue([new_job("big", "a")])
    [job] = (await backend.claim(["big"], "w", 1)).jobs
    assert job.claim is not None
    huge = b"x" * (50 * 1024 * 1024)  # refused by the driver itself (over 48 MB a message)
    with pytest.raises(BackendError, match="over MongoDB's document size limit") as raised:
        await backend.settle([Settle(job.claim, Outcome.COMPLETE, result=huge)])
    assert not isinstance(raised.value, CorruptRecordError)
    assert "unreadable" not in str(raised.value)
    stored = await get_job(backend, "big", "a")  # nothing was written: still claimed
    assert stored is not None and stored.state is JobState.ACTIVE


@pytest.mark.parametrize(
    "refusal",
    [
        OperationFailure("Resulting document after update is larger than 16777216", code=17419),
        BulkWriteError(
            {
                "writeErrors": [
                    {
                        "index": 0,
                        "code": 10334,
                        "errmsg": "BSONObj size: "
                        "17825862 (0x1100046) is invalid. Size must be between 0 and 16793600",
                    }
                ]
            }
        ),
    ],
)
async def test_the_server_refusing_a_document_as_too_large_is_named_too(
    refusal: OperationFailure,
) -> None:
    """A MongoDB server refuses a stored document over 16 MiB itself (the test server does
    not): its answer is translated the same way."""

    @translated
    async def update() -> None:
        raise refusal

    with pytest.raises(BackendError, match="over MongoDB's document size limit"):
        await update()
