"""The named queries of ``queries.sql`` and the migrations of ``migrations/``, read once.

``queries.sql`` holds blocks that start with ``-- name: <name>``; the comment lines after it
say what goes in and what comes out. No SQL lives in Python strings.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from relaymq.backends.sqlfile import named_queries

_MIGRATION = re.compile(r"^(\d{4})_\w+\.sql$")


@cache
def queries() -> dict[str, str]:
    """Every named query, by name, without its trailing semicolon."""
    return named_queries(__package__, "queries.sql")


def q(name: str) -> str:
    """The text of the named query ``name``."""
    return queries()[name]


@cache
def migrations() -> tuple[tuple[str, str], ...]:
    """``(name, sql)`` of every migration file, in order; the name is the file's stem."""
    folder = resources.files(__package__).joinpath("migrations")
    files = sorted(f.name for f in folder.iterdir() if _MIGRATION.match(f.name))
    numbers = [int(name[:4]) for name in files]
    if numbers != list(range(1, len(files) + 1)):
        raise ValueError(f"migrations must be numbered 0001, 0002, ... without gaps: {files}")
    return tuple(
        (name.removesuffix(".sql"), folder.joinpath(name).read_text(encoding="utf-8"))
        for name in files
    )
