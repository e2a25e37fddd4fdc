"""Bad input at the API boundary: a clear error naming what is wrong, and nothing stored or
changed, on every backend (issue 28, items 3, 4, 9 and 12)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import relaymq
from relaymq import Call, Queue
from relaymq.backends.base import Backend
from relaymq.errors import ArgumentValidationError, ConfigError
from relaymq.job import JobState
from relaymq.options import Options
from relaymq.schedules import Schedules, define
from tests import tasks


async def _counts(queue: Queue) -> dict[JobState, int]:
    return {s: n for s, n in (await queue.counts()).items() if n}


# -- item 3: arguments bound against the handler's signature at enqueue ---------------------


async def test_arguments_that_do_not_fit_the_task_are_refused_at_enqueue(
    backend: Backend, q: str
) -> None:
    queue = Queue(q, backend)
    on_q = tasks.add.with_options(queue=q, backend=backend)
    with pytest.raises(ArgumentValidationError, match=r"tests.tasks:add.*missing a required"):
        await on_q.enqueue()  # type: ignore[call-arg]
    with pytest.raises(ArgumentValidationError, match="unexpected keyword argument 'c'"):
        await on_q.enqueue(1, 2, c=3)  # type: ignore[call-arg]
    with pytest.raises(ArgumentValidationError, match="too many positional arguments"):
        await queue.add(tasks.add.call(1, 2, 3))  # type: ignore[call-arg]
    with pytest.raises(ArgumentValidationError, match="multiple values for argument 'a'"):
        await queue.add(tasks.add.call(1, a=2))  # type: ignore[call-arg]
    # One bad call in a batch: none of the batch is stored.
    with pytest.raises(ArgumentValidationError, match="missing a required argument: 'b'"):
        await queue.add_bulk([tasks.add.call(1, 2), tasks.add.call(1)])  # type: ignore[call-arg]
    # The JobContext parameter is the worker's to give, never the caller's.
    with pytest.raises(ArgumentValidationError, match="missing a required argument: 'label'"):
        await queue.add(tasks.with_context.call())  # type: ignore[call-arg]
    with pytest.raises(ArgumentValidationError, match="too many positional arguments"):
        await queue.add(tasks.with_context.call(None, "x"))  # type: ignore[call-arg]
    assert await _counts(queue) == {}
    # Arguments that fit are stored, given by position or by name.
    fit = [tasks.add.call(1, b=2), tasks.add.call(a=1, b=2)]
    await queue.add_bulk([*fit, tasks.with_context.call("x"), tasks.with_context.call(label="y")])
    assert await _counts(queue) == {JobState.WAITING: 4}


# -- item 4: ids, names and keys must be strings -----------------------------------------------

INJECTED: list[Any] = [{"$ne": None}, {"$regex": "^victim1$"}, {"$gt": ""}, ["victim1"], 7, None]


async def test_non_string_ids_are_refused_and_reach_no_backend(backend: Backend, q: str) -> None:
    queue = Queue(q, backend)
    on_q = tasks.add.with_options(queue=q, backend=backend)
    for i in (1, 2):
        await on_q.with_options(job_id=f"victim{i}").enqueue(1, 2)
    book = Schedules(backend)
    # What the error names, and the action; ``None`` is refused only where it is not the
    # default of an optional argument.
    required: list[tuple[str, Callable[[Any], Awaitable[Any]]]] = [
        ("job_id", queue.get_job),
        ("job_id", queue.cancel),
        ("job_id", queue.retry_job),
        ("job_id", queue.remove_job),
        ("job_id", lambda bad: queue.handle(bad).job()),
        ("job_id", lambda bad: queue.get_jobs([bad])),
        ("job_id", lambda bad: queue.cancel_jobs([bad])),
        ("job_id", lambda bad: queue.retry_jobs([bad])),
        ("job_id", lambda bad: queue.remove_jobs([bad])),
        ("depends_on", lambda bad: _call(on_q.with_options, depends_on=[bad])),
        ("queue", lambda bad: Queue(bad, backend).counts()),
        ("queue", lambda bad: Queue(bad, backend).drain()),
        ("queue", lambda bad: _call(relaymq.limit, bad, max_active=1)),
        ("schedule id", book.get),
        ("schedule id", book.remove),
        ("schedule id", book.pause),
        ("schedule id", book.resume),
        ("schedule id", book.run_now),
    ]
    optional: list[tuple[str, Callable[[Any], Awaitable[Any]]]] = [
        ("task", lambda bad: queue.list_jobs(JobState.WAITING, task=bad)),
        ("task", lambda bad: queue.cancel_jobs(task=bad)),
        ("task_contains", lambda bad: queue.list_jobs(JobState.WAITING, task_contains=bad)),
        ("task_contains", lambda bad: queue.retry_jobs(task_contains=bad)),
        ("job_id", lambda bad: _call(on_q.with_options, job_id=bad)),
        ("limit_key", lambda bad: _call(on_q.with_options, limit_key=bad)),
        ("throttle", lambda bad: _call(on_q.with_options, throttle=(bad, 5))),
        ("debounce", lambda bad: _call(on_q.with_options, debounce=(bad, 5))),
        ("queue", lambda bad: _call(on_q.with_options, queue=bad)),
    ]
    for bad in INJECTED:
        for what, action in required + ([] if bad is None else optional):
            with pytest.raises(ConfigError, match=what):
                await action(bad)
        # A call made by hand, past with_options, is refused at enqueue too.
        with pytest.raises(ConfigError, match="job_id"):
            await queue.add(Call(tasks.add, (1, 2), {}, Options(queue=q, job_id=bad or 7)))
    jobs = await queue.get_jobs(["victim1", "victim2"])
    assert [(j.id, j.state) for j in jobs if j is not None] == [
        ("victim1", JobState.WAITING),
        ("victim2", JobState.WAITING),
    ]
    assert await _counts(queue) == {JobState.WAITING: 2}


async def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


# -- item 9 and 12: control characters in ids, names and keys ---------------------------------

CONTROL = ["a\nb", "a\rb", "a\x00b", "a\x1b[31mb", "a\x7fb", "a\x85b", "trailing\n"]


async def test_ids_keys_and_names_with_control_characters_are_refused(
    backend: Backend, q: str
) -> None:
    queue = Queue(q, backend)
    on_q = tasks.add.with_options(queue=q, backend=backend)
    await on_q.with_options(job_id="parent").enqueue(1, 2)
    for bad in CONTROL:
        for option in ("job_id", "limit_key"):
            with pytest.raises(ConfigError, match=rf"{option}.*control character"):
                await on_q.with_options(**{option: bad}).enqueue(1, 2)
        with pytest.raises(ConfigError, match=r"depends_on.*control character"):
            await on_q.with_options(depends_on=["parent", bad]).enqueue(1, 2)
        with pytest.raises(ConfigError, match=r"throttle.*control character"):
            await on_q.with_options(throttle=(bad, 5)).enqueue(1, 2)
        with pytest.raises(ConfigError, match="queue name"):
            Queue(q + bad, backend)
        with pytest.raises(ConfigError, match=r"job_id.*control character"):
            await queue.get_job(bad)
        with pytest.raises(ConfigError, match=r"job_id.*control character"):
            await queue.cancel_jobs(["parent", bad])
        with pytest.raises(ConfigError, match="schedule id"):
            await Schedules(backend).remove("s" + bad)
        with pytest.raises(ConfigError, match=r"task name.*control character"):
            relaymq.task(name="evil" + bad)(tasks.add.fn)
    assert await _counts(queue) == {JobState.WAITING: 1}
    assert [j.id for j in await queue.list_jobs(JobState.WAITING)] == ["parent"]


def test_a_schedule_of_a_task_name_with_a_control_character_is_refused() -> None:
    with pytest.raises(ConfigError, match="schedule id"):
        define(tasks.add, id="daily\n", every=60, args=(1, 2))
    with pytest.raises(ConfigError, match=r"task name.*control character"):
        relaymq.Schedule(id="daily", task="tests.tasks:add\nforged", queue="q", every=60)
