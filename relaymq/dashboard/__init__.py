"""The web dashboard: every queue's counts and history, its jobs, the dead letters and the
workers, with the operator's actions; live over Server-Sent Events.

``relaymq dashboard --backend URL`` serves it; ``create_app(backend)`` gives the ASGI app to
serve or mount yourself. Needs the ``dashboard`` extra: ``pip install 'relaymq[dashboard]'``.
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as e:  # pragma: no cover - the hint is the point
    raise ImportError(
        "the relaymq dashboard needs Starlette and Jinja2: pip install 'relaymq[dashboard]'"
    ) from e

from relaymq.dashboard.guard import allowed_hosts_for
from relaymq.dashboard.security import Access, Throttle, exposure_problem
from relaymq.dashboard.server import create_app

__all__ = ["Access", "Throttle", "allowed_hosts_for", "create_app", "exposure_problem"]
