"""relaymq.contrib.starlette: a Starlette or FastAPI app enqueues through its request's Queue,
and the worker running inside the app runs the job; shutdown stops it and closes the backend."""

from __future__ import annotations

from pathlib import Path

import httpx
from fastapi import Depends, FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from relaymq import Queue
from relaymq.backends.base import Backend
from relaymq.contrib.starlette import RelayMQ
from tests import tasks
from tests.support.jobs import get_job, queue_name
from tests.worker.conftest import FAST


async def test_a_fastapi_app_enqueues_and_its_own_worker_runs_the_job(live: Backend) -> None:
    q = queue_name("app")
    relay = RelayMQ(backend=live, worker_queues=[q], settings=FAST)
    app = FastAPI(lifespan=relay.lifespan)

    @app.post("/add/{a}/{b}")
    async def add(a: int, b: int, queue: Queue = Depends(relay.queue(q))) -> dict[str, str]:  # noqa: B008
        handle = await queue.add(tasks.add.call(a, b))
        return {"job": handle.id}

    async with relay.lifespan(app):
        assert relay.worker is not None
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            answer = await client.post("/add/2/3")
        assert answer.status_code == 200
        assert await Queue(q, live).handle(answer.json()["job"]).result(timeout=10) == 5
    assert relay.worker is None  # stopped with the app


async def test_a_starlette_app_connects_its_url_and_closes_it(tmp_path: Path) -> None:
    q = queue_name("app")
    relay = RelayMQ(f"sqlite:///{tmp_path}/app.db", settings=FAST)

    async def enqueue(request: Request) -> JSONResponse:
        handle = await relay.queue(q)(request).add(tasks.add.call(1, 1))
        return JSONResponse({"job": handle.id})

    app = Starlette(routes=[Route("/", enqueue, methods=["POST"])], lifespan=relay.lifespan)
    async with relay.lifespan(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            job_id = (await client.post("/")).json()["job"]
        stored = await get_job(relay.backend, q, job_id)
        assert stored is not None and stored.state.value == "waiting"  # no worker in this app
    try:
        relay.backend  # noqa: B018 - closed with the app
    except RuntimeError as e:
        assert "has not started" in str(e)
    else:
        raise AssertionError("the backend outlived the app")
