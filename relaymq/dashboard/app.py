"""The dashboard's pages and actions: a Starlette app over one app (``relaymq.App``), whose
connected backend it reaches through the app's facade only.

Every page is rendered on the server (Jinja2); ``static/dashboard.js`` only keeps counts and a
job's events live from ``/events`` (Server-Sent Events) and asks before destructive actions.
Actions are POST forms guarded by ``security`` (auth when configured, CSRF always); each
redirects back with a one-line message of what it did.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import orjson
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.templating import Jinja2Templates

from relaymq.app import App
from relaymq.dashboard import charts, security
from relaymq.dashboard.live import Hub
from relaymq.dashboard.security import Access, Throttle, Throttled
from relaymq.dashboard.views import actions_for, job_view, progress_of
from relaymq.dashboard.web import (
    client_of,
    csrf_of,
    job_id_of,
    job_url,
    page_number,
    with_csrf,
)
from relaymq.errors import (
    ConfigError,
    JobNotFoundError,
    ScheduleNotFoundError,
)
from relaymq.job import DLQ_STATES, Job, JobState
from relaymq.keyusage import key_usage
from relaymq.options import validate_queue_name
from relaymq.overview import collect_workers, held_by
from relaymq.queue import Queue
from relaymq.records.search import JobFilter
from relaymq.records.store import CancelResult
from relaymq.retention import describe as describe_retention
from relaymq.schedules import Schedules

PAGE_SIZE = 50
SEARCH = ("id", "task", "newer", "older", "args")
"""A listing's search fields (``JobFilter.parse``): id prefix, part of the task name, ages,
argument conditions."""
STATES = tuple(JobState)
DLQ = tuple(s for s in JobState if s in DLQ_STATES)
BULK = {"retry": "retried", "cancel": "cancelled", "remove": "removed"}
QUEUE_ACTIONS = ("pause", "resume", "drain")
SCHEDULE_ACTIONS = ("pause", "resume", "run-now", "remove")


Endpoint = Callable[[Request], Awaitable[Response]]


@dataclass
class Dashboard:
    app: App
    access: Access
    hub: Hub
    templates: Jinja2Templates
    page_size: int = PAGE_SIZE
    throttle: Throttle = field(default_factory=Throttle)

    # -- guards -----------------------------------------------------------------------------

    def signed_in(self, request: Request) -> bool:
        """A session cookie, or a Bearer token (a wrong one counts against the client:
        ``Throttled`` once it must wait)."""
        if not self.access.required:
            return True
        if self.access.accepts_session(request.cookies.get(security.SESSION_COOKIE)):
            return True
        header = request.headers.get("authorization") or ""
        if not header.startswith("Bearer "):
            return False
        client = client_of(request)
        wait = self.throttle.wait(client)
        if wait > 0:
            raise Throttled(wait)
        if self.access.accepts_bearer(header):
            self.throttle.succeeded(client)
            return True
        self.throttle.failed(client)
        return False

    def page(self, fn: Endpoint) -> Endpoint:
        """A page: signed in (else to the login form), with a CSRF cookie for its forms."""

        async def endpoint(request: Request) -> Response:
            if not self.signed_in(request):
                target = request.url_for("login").include_query_params(next=request.url.path)
                return RedirectResponse(str(target), status_code=303)
            try:
                return with_csrf(request, await fn(request))
            except (ConfigError, ValueError) as e:  # a bad queue name, state or page number
                return PlainTextResponse(f"bad request: {e}", status_code=400)

        return endpoint

    def action(self, fn: Callable[[Request, FormData], Awaitable[Response]]) -> Endpoint:
        """A POST form: signed in, and carrying the CSRF cookie's value."""

        async def endpoint(request: Request) -> Response:
            if not self.signed_in(request):
                return PlainTextResponse("sign in first", status_code=401)
            form = await request.form()
            field = form.get(security.CSRF_FIELD)
            cookie = request.cookies.get(security.CSRF_COOKIE)
            if not security.csrf_matches(cookie, field if isinstance(field, str) else None):
                return PlainTextResponse(
                    "This form did not come from this dashboard, or it has expired: reload the "
                    "page and try again.",
                    status_code=403,
                )
            try:
                return await fn(request, form)
            except (ConfigError, ValueError) as e:
                return PlainTextResponse(f"refused: {e}", status_code=400)

        return endpoint

    def render(self, request: Request, template: str, **context: Any) -> Response:
        context |= {
            "csrf": csrf_of(request),
            "auth": self.access.required,
            "message": self._message(request),
        }
        return self.templates.TemplateResponse(request, template, context)

    def _message(self, request: Request) -> str:
        """The ``?done=`` message, when this dashboard wrote it (``sig`` is its signature)."""
        message = request.query_params.get("done", "")
        signature = request.query_params.get("sig", "")
        if message and hmac.compare_digest(self._signature(message), signature):
            return message
        return ""

    def _signature(self, message: str) -> str:
        return self.access.sign(f"done\0{message}")[:32]

    def back(self, request: Request, form: FormData, message: str) -> Response:
        """Back to the page the form was on (a path of this site), with ``message``."""
        target = str(form.get("back") or "")
        if not target.startswith("/") or target.startswith("//"):
            target = str(request.url_for("overview"))
        target = target.split("done=")[0].rstrip("?&")
        return RedirectResponse(self.with_message(target, message), status_code=303)

    def with_message(self, url: str, message: str) -> str:
        """``url`` showing ``message``, signed so that no other site can make it say more."""
        query = urlencode({"done": message, "sig": self._signature(message)})
        return f"{url}{'&' if '?' in url else '?'}{query}"

    # -- pages ------------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        names = await self.app.ops.list_queues()
        rows = await asyncio.gather(*(self._queue_row(n) for n in names))
        return self.render(request, "overview.html", rows=rows, states=STATES)

    async def _queue_row(self, name: str) -> dict[str, Any]:
        q = Queue(name, self.app)
        counts, paused, tallies = await asyncio.gather(q.counts(), q.is_paused(), q.history(1440))
        minute = int(time.time() // 60)
        hour = charts.window(tallies, f"{name}, last hour per minute", minute, 60, 60)
        day = charts.window(tallies, f"{name}, last day per hour", minute, 1440, 24)
        return {
            "name": name,
            "counts": counts,
            "paused": paused,
            "hour": hour,
            "day": day,
            "hour_chart": charts.small_chart(hour),
            "day_chart": charts.small_chart(day),
        }

    async def figures(self, request: Request) -> Response:
        """A queue's figures over the last hour and day, of every task or of ``?task=``:
        throughput, failure rate, run time and pickup latency, with charts, and its tasks."""
        q = self._queue(request)
        task = request.query_params.get("task") or None
        tallies = await q.history(1440)
        minute = int(time.time() // 60)
        hour = charts.window(tallies, "last hour, per minute", minute, 60, 60, task)
        day = charts.window(tallies, "last day, per 10 minutes", minute, 1440, 144, task)
        tasks = [
            (name, charts.window(tallies, "last day", minute, 1440, 1, name))
            for name in charts.tasks_of(tallies)
        ]
        return self.render(
            request,
            "figures.html",
            queue=q.name,
            task=task,
            hour=hour,
            day=day,
            hour_chart=charts.chart(hour, ticks=6),
            day_chart=charts.chart(day, ticks=8),
            tasks=tasks,
        )

    async def queue(self, request: Request) -> Response:
        """A queue's jobs of one state, a page at a time, narrowed by a search (``SEARCH``);
        an id that is a job's whole id goes to its page."""
        q = self._queue(request)
        wanted = request.query_params.get("id", "").strip()
        if wanted and await q.get_job(wanted) is not None:
            return RedirectResponse(job_url(request, q.name, wanted), status_code=303)
        return self.render(request, "queue.html", **await self._listing(request, q))

    async def _listing(self, request: Request, q: Queue) -> dict[str, Any]:
        state = JobState(request.query_params.get("state", JobState.WAITING.value))
        typed = {name: request.query_params.get(name, "") for name in SEARCH}
        task = typed["task"].strip() or None
        page = page_number(request.query_params.get("page", ""))
        offset = (page - 1) * self.page_size
        problem = ""
        try:
            where = JobFilter.parse(
                id_prefix=typed["id"],
                task=typed["task"],
                newer_than=typed["newer"],
                older_than=typed["older"],
                args=typed["args"],
                now=time.time(),
            )
        except ConfigError as e:  # a typo in the search: said on the page, nothing searched
            where, problem = JobFilter(), str(e)
        found = await q.search(state, where, offset, self.page_size + 1)
        jobs = found.jobs
        counts, paused, limits, kept = await asyncio.gather(
            q.counts(), q.is_paused(), q.limits(), q.retention()
        )
        usage = await key_usage(self.app.ops, q.name, limits) if limits is not None else None
        shown = jobs[: self.page_size]
        bars = None
        if state is JobState.ACTIVE:  # each running job's progress, kept live on the page
            bars = {j.id: progress_of(j) for j in shown if j.progress is not None}
        return {
            "queue": q.name,
            "bars": bars,
            "state": state,
            "task": task or "",
            "page": page,
            "jobs": shown,
            "more": len(jobs) > self.page_size,
            "counts": counts,
            "paused": paused,
            "limits": limits,
            "retention": describe_retention(kept),
            "usage": usage,
            "states": STATES,
            "actions": actions_for(state),
            "search": typed,
            "searched": not where.empty,
            "narrow": not where.empty and where != JobFilter(task_contains=task),
            "problem": problem,
            "found": found,
            "how": self.app.ops.backend.capabilities.search,
            "links": {k: v for k, v in typed.items() if v} | {"state": state.value},
        }

    async def job(self, request: Request) -> Response:
        q = self._queue(request)
        job_id = job_id_of(request)
        job = await q.get_job(job_id)
        if job is None:
            response = self.render(request, "missing.html", queue=q.name, job_id=job_id)
            response.status_code = 404
            return response
        view = job_view(job) | {"held_by": await held_by(q, job)}
        return self.render(request, "job.html", job=job, view=view)

    async def dlq(self, request: Request) -> Response:
        sections = []
        for name in await self.app.ops.list_queues():
            q = Queue(name, self.app)
            counts = await q.counts()
            if not any(counts.get(s, 0) for s in DLQ):
                continue
            jobs: list[Job] = []
            for s in DLQ:
                jobs += await q.list_jobs(s, 0, self.page_size)
            sections.append({"queue": name, "counts": counts, "jobs": jobs})
        return self.render(request, "dlq.html", sections=sections)

    async def workers(self, request: Request) -> Response:
        return self.render(request, "workers.html", workers=await collect_workers(self.app.ops))

    async def schedules(self, request: Request) -> Response:
        rows = []
        for s in await Schedules(self.app.ops).list():
            spec = s.schedule
            arguments = (
                ""
                if spec is None
                else orjson.dumps({"args": list(spec.args), "kwargs": dict(spec.kwargs)}).decode()
            )
            rows.append(
                {
                    "id": s.id,
                    "schedule": spec,
                    "next_at": s.next_at,
                    "paused": s.paused,
                    "error": s.error,
                    "arguments": arguments,
                }
            )
        return self.render(request, "schedules.html", schedules=rows)

    async def events(self, request: Request) -> Response:
        if not self.signed_in(request):
            return PlainTextResponse("sign in first", status_code=401)
        queue, job_id = request.query_params.get("queue"), request.query_params.get("job")
        follow = (queue, job_id) if queue and job_id else None
        return StreamingResponse(
            self.hub.stream(follow, None if job_id else queue),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    # -- actions ----------------------------------------------------------------------------

    async def queue_action(self, request: Request, form: FormData) -> Response:
        q = self._queue(request)
        what = str(form.get("action", ""))
        if what == "pause":
            await q.pause()
            done = f"{q.name} paused"
        elif what == "resume":
            await q.resume()
            done = f"{q.name} resumed"
        elif what == "drain":
            done = f"{await q.drain()} waiting and delayed jobs of {q.name} deleted"
        else:
            raise ConfigError(f"unknown queue action {what!r}; one of {', '.join(QUEUE_ACTIONS)}")
        return self.back(request, form, done)

    async def jobs_action(self, request: Request, form: FormData) -> Response:
        """Retry, cancel or remove the ticked jobs, or (``every``) every job of a state,
        narrowed by task."""
        q = self._queue(request)
        what = str(form.get("action", ""))
        if what not in BULK:
            raise ConfigError(f"unknown action {what!r}; one of {', '.join(BULK)}")
        ids = [str(i) for i in form.getlist("ids")]
        task = str(form.get("task") or "") or None
        state = JobState(str(form["state"])) if form.get("state") else None
        if form.get("every"):
            if state is None:
                raise ConfigError("acting on every job needs a state")
            selection: dict[str, Any] = {"state": state, "task_contains": task}
        elif ids:
            selection = {"job_ids": ids}
        else:
            return self.back(request, form, "nothing selected: tick jobs first")
        act = {"retry": q.retry_jobs, "cancel": q.cancel_jobs, "remove": q.remove_jobs}[what]
        n = await act(**selection)
        return self.back(request, form, f"{n} job{'s' if n != 1 else ''} {BULK[what]}")

    async def job_action(self, request: Request, form: FormData) -> Response:
        q = self._queue(request)
        job_id = job_id_of(request)
        what = str(form.get("action", ""))
        try:
            if what == "retry":
                if await q.retry_job(job_id):
                    done = f"job {job_id} is waiting again"
                else:
                    done = (
                        f"job {job_id} is {await self._state_of(q, job_id)}: only failed, "
                        "expired or cancelled jobs can be retried"
                    )
            elif what == "cancel":
                if await q.cancel(job_id) is CancelResult.CANCELLED:
                    done = f"job {job_id} cancelled"
                else:
                    done = (
                        f"job {job_id} is {await self._state_of(q, job_id)}: it had "
                        "already ended, so there was nothing to cancel"
                    )
            elif what == "remove":
                await q.remove_job(job_id)
                return RedirectResponse(
                    self.with_message(str(request.url_for("queue", queue=q.name)), "job removed"),
                    status_code=303,
                )
            else:
                raise ConfigError(f"unknown action {what!r}; one of {', '.join(BULK)}")
        except JobNotFoundError as e:
            done = str(e)
        return RedirectResponse(
            self.with_message(job_url(request, q.name, job_id), done), status_code=303
        )

    async def dlq_action(self, request: Request, form: FormData) -> Response:
        """Replay (retry) or purge (remove) dead-lettered jobs of one queue: the ticked ones,
        or every one (``every``)."""
        q = Queue(validate_queue_name(str(form.get("queue", ""))), self.app)
        what = str(form.get("action", ""))
        ids = [str(i) for i in form.getlist("ids")]
        selection: dict[str, Any] = {"state": DLQ} if form.get("every") else {"job_ids": ids}
        if not form.get("every") and not ids:
            return self.back(request, form, "nothing selected: tick jobs first")
        if what == "replay":
            n = await q.retry_jobs(**selection)
            done = f"{n} job{'s' if n != 1 else ''} of {q.name} replayed"
        elif what == "purge":
            if not form.get("every"):
                selection["state"] = DLQ
            n = await q.remove_jobs(**selection)
            done = f"{n} job{'s' if n != 1 else ''} of {q.name} purged"
        else:
            raise ConfigError(f"unknown action {what!r}; one of replay, purge")
        return self.back(request, form, done)

    async def schedule_action(self, request: Request, form: FormData) -> Response:
        """Pause, resume, run now or remove one schedule."""
        book = Schedules(self.app.ops)
        schedule_id = str(form.get("id", ""))
        what = str(form.get("action", ""))
        try:
            if what in ("pause", "resume", "remove"):
                await getattr(book, what)(schedule_id)
                done = f"schedule {schedule_id} {what}d"
            elif what == "run-now":
                handle = await book.run_now(schedule_id)
                done = f"enqueued job {handle.id} in {handle.queue}"
            else:
                raise ConfigError(f"unknown action {what!r}; one of {', '.join(SCHEDULE_ACTIONS)}")
        except ScheduleNotFoundError as e:
            done = str(e)
        return self.back(request, form, done)

    # -- signing in -------------------------------------------------------------------------

    async def login(self, request: Request) -> Response:
        if request.method == "GET":
            return with_csrf(
                request,
                self.render(
                    request, "login.html", failed=False, next=request.query_params.get("next", "")
                ),
            )
        form = await request.form()
        cookie = request.cookies.get(security.CSRF_COOKIE)
        sent = form.get(security.CSRF_FIELD)
        secret = form.get("secret")
        if not security.csrf_matches(cookie, sent if isinstance(sent, str) else None):
            return PlainTextResponse("reload the sign-in page and try again", status_code=403)
        client = client_of(request)
        wait = self.throttle.wait(client)
        if wait > 0:
            seconds = Throttled(wait).seconds
            response = self.render(
                request, "login.html", failed=False, wait=seconds, next=str(form.get("next", ""))
            )
            response.status_code = 429
            response.headers["Retry-After"] = str(seconds)
            return response
        if not isinstance(secret, str) or not self.access.accepts_secret(secret):
            self.throttle.failed(client)
            response = self.render(
                request, "login.html", failed=True, next=str(form.get("next", ""))
            )
            response.status_code = 401
            return response
        self.throttle.succeeded(client)
        target = str(form.get("next") or "")
        if not target.startswith("/") or target.startswith("//"):  # never off this site
            target = str(request.url_for("overview"))
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            security.SESSION_COOKIE,
            self.access.new_session(),
            max_age=security.SESSION_SECONDS,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def logout(self, request: Request, form: FormData) -> Response:
        self.access.revoke(request.cookies.get(security.SESSION_COOKIE))
        response = RedirectResponse(str(request.url_for("login")), status_code=303)
        response.delete_cookie(security.SESSION_COOKIE)
        return response

    # -- helpers ----------------------------------------------------------------------------

    async def _state_of(self, q: Queue, job_id: str) -> str:
        job = await q.get_job(job_id)
        return "gone" if job is None else job.state.value

    def _queue(self, request: Request) -> Queue:
        return Queue(validate_queue_name(request.path_params["queue"]), self.app)
