"""The SQLite backend's URL and its options.

``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` (the SQLAlchemy convention:
what follows ``sqlite:///`` is the path), with options as a query string:
``synchronous=normal|full``, ``busy_timeout`` (seconds), ``poll_max`` (seconds),
``events_keep`` (how many recent events the table keeps). Keyword arguments give defaults; the
URL wins.
"""

from __future__ import annotations

from dataclasses import dataclass

from relaymq.backends.urls import split_options
from relaymq.errors import ConfigError

POLL_MIN = 0.005
"""The shortest polling interval of an idle ``wait`` (seconds)."""


@dataclass(frozen=True, slots=True)
class Options:
    path: str
    synchronous: str = "normal"
    busy_timeout: float = 30.0
    poll_max: float = 1.0
    events_keep: int = 10_000


def parse_url(url: str) -> tuple[str, dict[str, str]]:
    """The file path and the options of a ``sqlite:///path`` URL."""
    prefix = "sqlite:///"
    if not url.lower().startswith(prefix):
        raise ConfigError(
            f"bad SQLite URL {url!r}: write sqlite:///relative/file.db or sqlite:////abs/file.db"
        )
    path, _, query = url[len(prefix) :].partition("?")
    if not path or path in {"/", ":memory:"} or path.endswith("/"):
        raise ConfigError(
            f"SQLite URL {url!r} names no database file: write sqlite:///relaymq.db (relative) or "
            "sqlite:////var/lib/app/relaymq.db (absolute); for a process-local queue use memory://"
        )
    ours, _ = split_options(query, OURS, (), "SQLite")
    return path, ours


OURS = ("synchronous", "busy_timeout", "poll_max", "events_keep")


def parse(url: str, defaults: Options | None = None) -> Options:
    """The options of ``url``; what the URL leaves out comes from ``defaults``."""
    path, given = parse_url(url)
    base = defaults or Options(path)
    try:
        synchronous = given.get("synchronous", base.synchronous).lower()
        options = Options(
            path,
            synchronous,
            float(given.get("busy_timeout", base.busy_timeout)),
            max(POLL_MIN, float(given.get("poll_max", base.poll_max))),
            max(1, int(given.get("events_keep", base.events_keep))),
        )
    except ValueError as e:
        raise ConfigError(f"bad option in SQLite URL {url!r}: {e}") from e
    if synchronous not in {"normal", "full"}:
        raise ConfigError(f"synchronous must be 'normal' or 'full', not {synchronous!r}")
    return options
