"""The dashboard as an ASGI app: ``create_app`` puts the pages and actions of ``Dashboard``
(``relaymq.dashboard.app``) on their routes, behind the Host guard and the sign-in, with the
Prometheus metrics and the error pages."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from relaymq.app import App, default_app
from relaymq.backends.base import Backend
from relaymq.dashboard.app import PAGE_SIZE, Dashboard, Endpoint
from relaymq.dashboard.guard import Guard, host_name
from relaymq.dashboard.live import Hub
from relaymq.dashboard.security import Access, SessionKey, Throttle, Throttled
from relaymq.dashboard.views import pretty, seconds
from relaymq.dashboard.web import job_href
from relaymq.errors import BackendError, BackendUnavailableError
from relaymq.job import error_line
from relaymq.overview import when


def create_app(
    app: App | Backend,
    *,
    token: str | None = None,
    password: str | None = None,
    metrics: bool = True,
    live_interval: float = 0.5,
    page_size: int = PAGE_SIZE,
    allowed_hosts: Iterable[str] | None = None,
    session_key_file: str | Path | None = None,
    throttle: Throttle | None = None,
) -> Starlette:
    """The dashboard as an ASGI app over ``app`` (connected, and closed, by the caller; a
    backend given as such is the default app's on it): serve it with uvicorn, or mount it
    (``Mount("/relaymq", create_app(app))``).

    With ``token`` or ``password``, nothing is readable or writable without signing in (or,
    for the token, ``Authorization: Bearer``); without either it is open to anyone who
    reaches it, so serve it on a loopback address (``relaymq dashboard`` refuses otherwise).
    ``metrics``: serve Prometheus metrics at ``/metrics`` (needs prometheus-client).
    ``allowed_hosts``: the ``Host`` names (any port) it answers to, anything else a 400
    (``guard.allowed_hosts_for(bind)`` gives a bind address's; ``relaymq dashboard`` always
    sets them); None: every Host, for an app that checks it in front.
    ``session_key_file``: keep the session key there, so processes and restarts sharing the
    file share sessions (``relaymq dashboard --rotate-sessions`` replaces it); without it, a
    random key per app, so a restart ends every session. ``throttle``: how failed sign-ins
    and bad Bearer tokens slow a client down (default ``Throttle()``)."""
    env = Environment(
        loader=PackageLoader("relaymq.dashboard", "templates"),
        autoescape=select_autoescape(default=True),
    )
    env.filters["when"] = when
    env.filters["summary"] = error_line
    env.filters["pretty"] = pretty
    env.filters["duration"] = seconds
    env.filters["combine"] = lambda a, b: {**a, **b}
    env.globals["job_href"] = job_href
    access = Access(token, password, SessionKey(session_key_file))
    relay = app if isinstance(app, App) else default_app().over(app)
    d = Dashboard(
        relay,
        access,
        Hub(relay.ops, live_interval),
        Jinja2Templates(env=env),
        page_size,
        throttle or Throttle(),
    )
    routes = [
        Route("/", d.page(d.overview), name="overview"),
        Route("/queues/{queue}", d.page(d.queue), name="queue"),
        Route("/queues/{queue}/figures", d.page(d.figures), name="figures"),
        Route(
            "/queues/{queue}/actions",
            d.action(d.queue_action),
            methods=["POST"],
            name="queue_action",
        ),
        Route(
            "/queues/{queue}/jobs", d.action(d.jobs_action), methods=["POST"], name="jobs_action"
        ),
        Route(
            "/queues/{queue}/jobs/{job_id:path}",
            by_method(d.page(d.job), d.action(d.job_action)),
            methods=["GET", "POST"],
            name="job",
        ),
        Route("/dlq", d.page(d.dlq), name="dlq"),
        Route("/dlq/actions", d.action(d.dlq_action), methods=["POST"], name="dlq_action"),
        Route("/workers", d.page(d.workers), name="workers"),
        Route("/schedules", d.page(d.schedules), name="schedules"),
        Route(
            "/schedules/actions",
            d.action(d.schedule_action),
            methods=["POST"],
            name="schedule_action",
        ),
        Route("/events", d.events, name="events"),
        Route("/login", d.login, methods=["GET", "POST"], name="login"),
        Route("/logout", d.action(d.logout), methods=["POST"], name="logout"),
        Mount("/static", StaticFiles(packages=[("relaymq.dashboard", "static")]), name="static"),
    ]
    if metrics:
        routes.append(Route("/metrics", MetricsApp(d), name="metrics"))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await d.hub.close()

    allowed = None if allowed_hosts is None else frozenset(host_name(h) for h in allowed_hosts)
    web = Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[Middleware(Guard, allowed=allowed)],
        exception_handlers={BackendError: backend_error, Throttled: too_many},
    )
    web.state.dashboard = d
    return web


def by_method(get: Endpoint, post: Endpoint) -> Endpoint:
    """One URL, two endpoints: a job's page (GET) and its actions (POST)."""

    async def endpoint(request: Request) -> Response:
        return await (post if request.method == "POST" else get)(request)

    return endpoint


class MetricsApp:
    """Prometheus metrics (the queue gauges, read when scraped) behind the same sign-in: an
    ASGI app, so ``Route`` passes it the raw request."""

    def __init__(self, d: Dashboard) -> None:
        from prometheus_client import CollectorRegistry

        from relaymq.metrics import Metrics, asgi_app

        self.d = d
        metrics = Metrics(CollectorRegistry())
        metrics.watch(d.app.ops)
        self.inner = asgi_app(metrics)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if not self.d.signed_in(Request(scope)):
            await PlainTextResponse("sign in first", status_code=401)(scope, receive, send)
            return
        await self.inner(scope, receive, send)


async def too_many(request: Request, exc: Exception) -> Response:
    wait = exc.seconds if isinstance(exc, Throttled) else 60
    return PlainTextResponse(
        f"Too many failed sign-ins from this address: try again in {wait}s.",
        status_code=429,
        headers={"Retry-After": str(wait)},
    )


async def backend_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, BackendUnavailableError):
        text = f"The backend cannot be reached right now ({exc}); reload once it is back."
    else:
        text = f"The backend answered with an error: {exc}"
    return PlainTextResponse(text, status_code=503)
