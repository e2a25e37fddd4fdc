"""``relaymq.App``: what an app owns (its backend, declarations, facade and observers), and the
default app behind ``@relaymq.task``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

import relaymq
from relaymq import App, ConfigError, JobState, Queue, Worker
from relaymq.app import default_app
from relaymq.backends.memory import InMemoryBackend
from relaymq.observers import Observer
from tests import tasks


class Enqueues(Observer):
    def __init__(self) -> None:
        self.queues: list[str] = []

    def enqueuing(self, jobs: Any) -> Any:
        self.queues += [j.queue for j in jobs]
        return jobs


@contextlib.contextmanager
def observing(app: App) -> Iterator[Enqueues]:
    seen = Enqueues()
    app.observe(seen)
    try:
        yield seen
    finally:
        app.unobserve(seen)


def test_an_app_keeps_its_declarations_to_itself() -> None:
    app = App("memory://")

    @app.task("own.tick", queue="own-q", every=60)
    async def tick() -> None: ...

    limits = app.limit("own-q", rate="10/m")
    assert app.tasks == {"own.tick": tick} and tick.app is app
    assert app.limits == {"own-q": limits} and set(app.schedules) == {"own.tick"}
    assert "own.tick" not in default_app().tasks and "own-q" not in default_app().limits
    assert tasks.add.app is default_app() and default_app().tasks[tasks.add.name] is tasks.add


async def test_an_app_connects_once_on_first_use_and_again_after_close() -> None:
    app = App("memory://")

    @app.task(queue="lazy-q")
    async def job(n: int) -> int:
        return n

    assert not app.connected
    with pytest.raises(ConfigError, match="not connected"):
        Queue("lazy-q", app)
    first, second = await asyncio.gather(job.enqueue(1), job.enqueue(2))
    assert app.connected and first.backend is second.backend
    assert (await Queue("lazy-q", app).counts())[JobState.WAITING] == 2
    await app.close()
    assert not app.connected
    await job.enqueue(3)  # a new backend: memory:// starts empty
    assert (await Queue("lazy-q", app).counts())[JobState.WAITING] == 1
    await app.close()


async def test_a_worker_runs_its_apps_tasks_and_stores_its_limits() -> None:
    app = App("memory://")
    app.limit("work-q", max_active=1)

    @app.task(queue="work-q")
    async def double(n: int) -> int:
        return n * 2

    handle = await double.enqueue(21)
    worker = Worker(app, ["work-q"])
    running = asyncio.create_task(worker.run())
    try:
        assert await handle.result(timeout=10) == 42
        assert await Queue("work-q", app).limits() == app.limits["work-q"]
    finally:
        worker.stop()
        await running
        await app.close()


async def test_observers_belong_to_their_app() -> None:
    app = App(backend=InMemoryBackend())

    @app.task(queue="seen-q")
    async def job() -> None: ...

    with observing(app) as mine, observing(default_app()) as default:
        await job.enqueue()
        await tasks.add.with_options(queue="other-q", backend=InMemoryBackend()).enqueue(1, 2)
    assert mine.queues == ["seen-q"]
    assert default.queues == ["other-q"]


async def test_a_queue_on_a_backend_is_the_default_apps_on_it() -> None:
    backend = InMemoryBackend()
    with observing(default_app()) as seen:
        await Queue("plain-q", backend).add(tasks.add.call(1, 2))
        await Queue("plain-q", backend).add(tasks.add.call(3, 4))
    assert seen.queues == ["plain-q", "plain-q"]
    await backend.pause("plain-q")  # not seen yet: the first look was a moment ago
    handle = await tasks.add.with_options(queue="plain-q", backend=backend).enqueue(5, 6)
    assert handle.paused is False  # the same view of the queue as the Queue's enqueues


async def test_set_default_backend_is_the_default_apps_backend() -> None:
    backend = InMemoryBackend()
    relaymq.set_default_backend(backend)
    try:
        handle = await tasks.add.enqueue(1, 1)
        assert handle.backend is backend and default_app().ops.backend is backend
        assert await default_app().ops.get_jobs("tests", [handle.id]) != [None]
    finally:
        relaymq.set_default_backend(None)
    assert not default_app().connected
