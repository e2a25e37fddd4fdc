"""Searching by argument values on MongoDB: the server cuts by the decoded copy of each job's
payload (``arguments``), and a job stored without one (arguments BSON cannot hold as they are,
a payload that is not JSON, a large one, a job stored before the copy existed) is still found,
by its payload. The contract suite (tests/contract/test_search.py) holds the rule itself."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from relaymq.backends.base import Backend
from relaymq.backends.mongodb.records import ARGUMENTS_MAX
from relaymq.job import JobState
from relaymq.records.search import ArgMatch, JobFilter
from tests.support.jobs import new_job, queue_name


@pytest.fixture
def q() -> str:
    return queue_name()


def payload(**kwargs: Any) -> bytes:
    return orjson.dumps({"args": [], "kwargs": kwargs})


def nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = {"d": value}
    return value


async def stored(backend: Backend, q: str) -> dict[str, Any]:
    """Each job's ``arguments`` field as stored (absent: None), by job id."""
    jobs = backend._jobs  # type: ignore[attr-defined]
    return {d["id"]: d.get("arguments") async for d in jobs.find({"queue": q})}


async def found(backend: Backend, q: str, *conditions: str | ArgMatch) -> list[str]:
    where = JobFilter(
        args=tuple(c if isinstance(c, ArgMatch) else ArgMatch.parse(c) for c in conditions)
    )
    return [j.id for j in await backend.list_jobs(q, JobState.WAITING, 0, 100, where)]


async def test_jobs_bson_cannot_copy_are_stored_and_found_by_their_payload(
    backend: Backend, q: str
) -> None:
    jobs = {
        "plain": payload(customer=42, email="ada@example.com"),
        "huge-int": payload(customer=2**63 + 5),  # orjson writes it, BSON cannot hold it
        "dotted": payload(customer=42, extra={"a.b": 1}),
        "dollar": payload(customer=42, extra={"$where": "1"}),
        "deep": payload(customer=42, extra=nested(60)),
        "large": payload(customer=42, blob="x" * ARGUMENTS_MAX),
        "not-json": b"\x80\x04pickled",
    }
    await backend.enqueue([new_job(q, i, payload=p) for i, p in jobs.items()])
    copies = await stored(backend, q)
    assert copies["plain"] == {"args": [], "kwargs": {"customer": 42, "email": "ada@example.com"}}
    assert {i for i, c in copies.items() if c is None} == set(jobs) - {"plain"}
    assert await found(backend, q, "kwargs.customer=42") == [
        "plain",
        "dotted",
        "dollar",
        "deep",
        "large",
    ]
    assert await found(backend, q, f"kwargs.customer={2**63 + 5}") == ["huge-int"]
    assert await found(backend, q, "kwargs.extra.a.b=1") == []  # a path, not the name "a.b"
    assert await found(backend, q, ArgMatch(("kwargs", "extra", "$where"), "1")) == ["dollar"]
    assert await found(backend, q, "kwargs.email~@example") == ["plain"]
    # every job reads back with its payload as it was enqueued
    for job in await backend.list_jobs(q, JobState.WAITING, 0, 100):
        assert job.payload == jobs[job.id]


async def test_a_job_stored_before_the_copy_existed_is_found(backend: Backend, q: str) -> None:
    await backend.enqueue([new_job(q, f"j{n}", payload=payload(n=n % 2)) for n in range(6)])
    jobs = backend._jobs  # type: ignore[attr-defined]
    await jobs.update_many({"queue": q, "id": {"$in": ["j1", "j4"]}}, {"$unset": {"arguments": 1}})
    assert [i for i, c in (await stored(backend, q)).items() if c is None] == ["j1", "j4"]
    assert await found(backend, q, "kwargs.n=1") == ["j1", "j3", "j5"]
    assert await found(backend, q, "kwargs.n=0") == ["j0", "j2", "j4"]
    # pages count only the jobs that match
    where = JobFilter(args=(ArgMatch.parse("kwargs.n=0"),))
    page = await backend.list_jobs(q, JobState.WAITING, 1, 1, where)
    assert [j.id for j in page] == ["j2"]


@pytest.mark.parametrize("value", [{"$ne": None}, {"$gt": ""}, ["x"]])
async def test_a_value_is_never_read_as_an_operator(backend: Backend, q: str, value: Any) -> None:
    """A caller past ``JobFilter.parse`` (which takes JSON scalars only) finds nothing with a
    document or list as the value: it is compared, not obeyed."""
    await backend.enqueue([new_job(q, "victim", payload=payload(secret="s3cret"))])
    assert await found(backend, q, ArgMatch(("kwargs", "secret"), value)) == []
