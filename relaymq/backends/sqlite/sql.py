"""Load the SQL files that sit next to this module: named queries and the schema script."""

from __future__ import annotations

import re
from importlib import resources

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def read(filename: str) -> str:
    """The text of ``filename`` from this package."""
    return resources.files(__package__).joinpath(filename).read_text(encoding="utf-8")


def load_queries(filename: str) -> dict[str, str]:
    """Split ``filename`` into ``{name: statement}`` at each ``-- name: <name>`` header.

    The comment lines under a header stay in the statement (SQLite ignores them); the text
    before the first header is the file's own header and is dropped.
    """
    parts = _NAME.split(read(filename))
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"{filename}: query {name!r} is defined twice")
        queries[name] = body.strip()
    return queries


QUERIES = load_queries("queries.sql")
SCHEMA = read("schema.sql")
