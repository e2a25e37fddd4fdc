"""Searching a queue's jobs (``Queue.search``: id prefix, a part of the task name, age, argument
values) finds the same jobs on every backend, in listing order: with the backend's own query
where it has one (``capabilities.search``: SQL on SQLite and PostgreSQL, a filter on MongoDB),
by a bounded scan of pages where it has none, which the answer says."""

from __future__ import annotations

import orjson
import pytest

from relaymq import bulk
from relaymq.backends.base import Backend
from relaymq.errors import ConfigError
from relaymq.instrumented import Instrumented
from relaymq.job import JobState
from relaymq.records.search import ArgMatch, JobFilter
from relaymq.testing import FakeClock
from tests.support.jobs import new_job

JOBS = [  # id, task, args, kwargs
    ("order-1", "app.mail:send", [42, "ada"], {"email": "ada@example.com", "vip": True}),
    ("order-2", "app.mail:send", [7, "bob"], {"email": "bob@example.org", "vip": False}),
    ("order-3", "app.mail:digest", ["42", None], {"email": None, "n": {"id": 42.0}}),
    ("refund-1", "app.pay:refund", [42.0], {"email": "cy@example.com", "vip": 1}),
    ("refund-2", "app.pay:refund", [], {}),
]


async def seeded(backend: Backend, clock: FakeClock, q: str) -> Instrumented:
    for job_id, task, args, kwargs in JOBS:  # one a minute: ages to search by
        payload = orjson.dumps({"args": args, "kwargs": kwargs})
        await backend.enqueue([new_job(q, job_id, task=task, payload=payload)])
        clock.advance(60)
    return Instrumented(backend)


async def ids(ops: Instrumented, q: str, where: JobFilter, **page: int) -> list[str]:
    found = await bulk.search(ops, q, JobState.WAITING, where, **page)
    return [j.id for j in found.jobs]


def args(*conditions: str) -> JobFilter:
    return JobFilter(args=tuple(ArgMatch.parse(c) for c in conditions))


async def test_each_condition_finds_the_same_jobs_on_every_backend(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    ops = await seeded(backend, clock, q)
    start = clock() - 5 * 60  # the first job's enqueue
    assert await ids(ops, q, JobFilter(id_prefix="order-")) == ["order-1", "order-2", "order-3"]
    assert await ids(ops, q, JobFilter(id_prefix="refund-2")) == ["refund-2"]
    assert await ids(ops, q, JobFilter(task_contains="pay:")) == ["refund-1", "refund-2"]
    assert await ids(ops, q, JobFilter(created_after=start + 120)) == [
        "order-3",
        "refund-1",
        "refund-2",
    ]
    assert await ids(ops, q, JobFilter(created_before=start + 60)) == ["order-1"]
    assert await ids(ops, q, args("args.0=42")) == ["order-1", "refund-1"]  # 42 and 42.0
    assert await ids(ops, q, args('args.0="42"')) == ["order-3"]  # the string, not the number
    assert await ids(ops, q, args("args.1=ada")) == ["order-1"]  # a bare word is a string
    assert await ids(ops, q, args("kwargs.email~@example.com")) == ["order-1", "refund-1"]
    assert await ids(ops, q, args("kwargs.vip=true")) == ["order-1"]  # true, not 1
    assert await ids(ops, q, args("kwargs.vip=1")) == ["refund-1"]
    assert await ids(ops, q, args("kwargs.email=null")) == ["order-3"]  # null, not missing
    assert await ids(ops, q, args("kwargs.n.id=42")) == ["order-3"]
    assert await ids(ops, q, args("args.0~4")) == ["order-1", "order-3", "refund-1"]
    both = JobFilter(task_contains="send", args=(ArgMatch.parse("kwargs.vip=false"),))
    assert await ids(ops, q, both) == ["order-2"]
    assert await ids(ops, q, args("kwargs.missing=1")) == []


async def test_a_search_pages_through_what_it_finds(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    ops = await seeded(backend, clock, q)
    where = args("kwargs.email~example")
    assert await ids(ops, q, where, offset=1, limit=2) == ["order-2", "refund-1"]
    assert await ids(ops, q, where, offset=3, limit=2) == []


async def test_the_backends_own_query_takes_what_its_capabilities_name(
    backend: Backend, clock: FakeClock, q: str
) -> None:
    ops = await seeded(backend, clock, q)
    how = backend.capabilities.search
    found = await bulk.search(ops, q, JobState.WAITING, args("args.0=42"), scan=3)
    if how == "native":  # one query: nothing read here, no bound
        assert found.scanned is None and [j.id for j in found.jobs] == ["order-1", "refund-1"]
    else:  # read here, 3 jobs at most: the bound is said
        assert found.scanned == 3 and found.cut and [j.id for j in found.jobs] == ["order-1"]
    fields = JobFilter(id_prefix="refund")
    if how == "native":
        listed = await backend.list_jobs(q, JobState.WAITING, 0, 10, fields)
        assert [j.id for j in listed] == ["refund-1", "refund-2"]
    found = await bulk.search(ops, q, JobState.WAITING, fields)
    assert [j.id for j in found.jobs] == ["refund-1", "refund-2"]
    assert (found.scanned is None) == (how != "scan")


def test_what_an_operator_types_is_read_or_refused_clearly() -> None:
    where = JobFilter.parse(
        id_prefix=" ord ", task="send", newer_than="2h", args="args.0=42 kwargs.a~x", now=10_000
    )
    assert where == JobFilter(
        "ord",
        "send",
        10_000 - 7200,
        None,
        (ArgMatch(("args", 0), 42), ArgMatch(("kwargs", "a"), "x", True)),
    )
    assert str(where.args[1]) == "kwargs.a~x"
    for bad in ("args=1", "args.x=1", "kwargs=1", "email=1", "kwargs.a~", 'kwargs.a={"b":1}'):
        with pytest.raises(ConfigError):
            ArgMatch.parse(bad)
    with pytest.raises(ConfigError, match="not an age"):
        JobFilter.parse(older_than="soon", now=0)
