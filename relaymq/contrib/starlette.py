"""Starlette and FastAPI: a relaymq app connected for the web app's lifetime, a worker run
inside it if wanted, and each request handler's ``Queue``.

::

    relay = RelayMQ("redis://127.0.0.1:6379/0", worker_queues=["emails"])
    app = Starlette(routes=[...], lifespan=relay.lifespan)     # or FastAPI(lifespan=...)

    @app.post("/signup")                                        # FastAPI
    async def signup(queue: Queue = Depends(relay.queue("emails"))) -> dict[str, str]:
        handle = await queue.add(send_welcome.call("a@example.com"))
        return {"job": handle.id}

From a plain Starlette endpoint: ``queue = relay.queue("emails")(request)``. An app with a
lifespan of its own enters ``relay.lifespan(app)`` inside it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

try:
    from starlette.requests import Request
except ImportError as e:  # pragma: no cover - the hint is the point
    raise ImportError(
        "relaymq.contrib.starlette needs Starlette: pip install 'relaymq[starlette]'"
    ) from e

from relaymq.app import App, default_app
from relaymq.backends.base import Backend
from relaymq.queue import Queue
from relaymq.settings import Settings
from relaymq.worker import Worker


class RelayMQ:
    """One relaymq app for a web app: ``app`` (default: the default app of ``@relaymq.task``)
    on ``url`` (default: ``RELAYMQ_BACKEND`` or the SQLite default), connected at startup and
    closed at shutdown; a ``backend`` given instead is used as it is and left open. With
    ``worker_queues``, a ``Worker`` runs those queues inside the web app and stops gracefully
    at shutdown (``settings.shutdown_timeout``)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        backend: Backend | None = None,
        worker_queues: Sequence[str] = (),
        settings: Settings | None = None,
        app: App | None = None,
    ) -> None:
        self.url = url
        self._declared = app or default_app()
        self.worker_queues = list(worker_queues)
        self.settings = settings or Settings.from_env()
        self.worker: Worker | None = None
        """The worker running inside the app, while it runs."""
        self._given = backend
        self._app: App | None = None if backend is None else self._declared.over(backend)

    @property
    def app(self) -> App:
        """The connected relaymq app; only between startup and shutdown."""
        if self._app is None or not self._app.connected:
            raise RuntimeError("relaymq: the app has not started (use lifespan=relay.lifespan)")
        return self._app

    @property
    def backend(self) -> Backend:
        """The connected backend (the app's); only between startup and shutdown."""
        return self.app.ops.backend

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any = None) -> AsyncIterator[None]:
        """The app's lifespan: ``Starlette(lifespan=relay.lifespan)``."""
        if self._given is None:
            self._app = self._declared.on(self.url or self.settings.backend)
            await self._app.connect()
        running: asyncio.Task[None] | None = None
        try:
            if self.worker_queues:
                self.worker = Worker(self.app, self.worker_queues, settings=self.settings)
                running = asyncio.create_task(self.worker.run(), name="relaymq-app-worker")
                await _started(self.worker, running)
            yield
        finally:
            if running is not None and self.worker is not None:
                self.worker.stop()
                await running
                self.worker = None
            if self._given is None and self._app is not None:
                await self._app.close()
                self._app = None

    def queue(self, name: str) -> Callable[[Request], Queue]:
        """A request's ``Queue`` named ``name``: a FastAPI dependency
        (``Depends(relay.queue("emails"))``), or call it with a Starlette request."""

        def get(request: Request) -> Queue:
            return Queue(name, self.app, settings=self.settings)

        return get


async def _started(worker: Worker, running: asyncio.Task[None]) -> None:
    """Wait until the worker claims, or raise what stopped it from starting."""
    ready = asyncio.ensure_future(worker.started.wait())
    await asyncio.wait({ready, running}, return_when=asyncio.FIRST_COMPLETED)
    if not ready.done():
        ready.cancel()
        running.result()  # raises the worker's error
