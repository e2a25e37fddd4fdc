"""What the dashboard reads from a request and writes on a response: the page asked for, the
CSRF token, a job's URL (for any id the API accepts) and the client the sign-in throttle counts.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from jinja2 import pass_context
from jinja2.runtime import Context
from starlette.requests import Request
from starlette.responses import Response

from relaymq.dashboard import security
from relaymq.errors import ConfigError

MAX_PAGE = 10_000_000
"""The highest page number a listing accepts: far past any queue, and its offset still fits
every backend's integers."""


def page_number(text: str) -> int:
    """A listing's ``?page=``: empty is the first; anything but 1 to ``MAX_PAGE`` is refused."""
    if not text:
        return 1
    digits = text.isascii() and text.isdigit() and len(text) <= len(str(MAX_PAGE))
    if not digits or not 1 <= int(text) <= MAX_PAGE:
        raise ConfigError(f"page must be a whole number from 1 to {MAX_PAGE}, not {text!r}")
    return int(text)


def csrf_of(request: Request) -> str:
    token = getattr(request.state, "csrf", None) or request.cookies.get(security.CSRF_COOKIE)
    if not token:
        token = security.new_csrf()
    request.state.csrf = token
    return str(token)


def with_csrf(request: Request, response: Response) -> Response:
    """Set the CSRF cookie the page's forms were rendered with, if the browser lacks it."""
    token = csrf_of(request)
    if request.cookies.get(security.CSRF_COOKIE) != token:
        response.set_cookie(
            security.CSRF_COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
    return response


def job_url(request: Request, queue: str, job_id: str) -> str:
    """The job's page (and, POSTed to, its actions): the id percent-encoded whole, so ids with
    '/', '?', '#', '%' or spaces stay one path segment. A browser would resolve a segment '.' or
    '..' (even percent-encoded) away, so those two ids go in the query instead."""
    if job_id in (".", ".."):
        return f"{request.url_for('job', queue=queue, job_id='')}?{urlencode({'id': job_id})}"
    return str(request.url_for("job", queue=queue, job_id=quote(job_id, safe="")))


@pass_context
def job_href(context: Context, queue: str, job_id: str) -> str:
    """``job_url`` for templates: ``{{ job_href(job.queue, job.id) }}``."""
    return job_url(context["request"], queue, job_id)


def job_id_of(request: Request) -> str:
    """The job id of a job URL (see ``job_url``): the decoded path, or ``?id=``."""
    job_id = str(request.path_params["job_id"])
    if not job_id:
        job_id = request.query_params.get("id", "")
    if not job_id:
        raise ConfigError("no job id in the URL")
    return job_id


def client_of(request: Request) -> str:
    """Whom the sign-in throttle counts: the client's address (behind a proxy, the address
    uvicorn's --proxy-headers gives)."""
    return request.client.host if request.client else "unknown"
