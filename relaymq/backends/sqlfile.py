"""SQL lives in files: the one loader for the SQLite and PostgreSQL backends.

A queries file holds blocks that start with ``-- name: <name>``; the comment lines after the
header say what goes in and what comes out. The text before the first header is the file's own
header and is dropped. No SQL lives in Python strings.
"""

from __future__ import annotations

import re
from importlib import resources

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def read(package: str, filename: str) -> str:
    """The text of ``filename`` (a path relative to ``package``'s folder)."""
    return resources.files(package).joinpath(filename).read_text(encoding="utf-8")


def named_queries(package: str, filename: str) -> dict[str, str]:
    """``{name: statement}`` for every ``-- name:`` block of ``filename``, each without its
    trailing semicolon. A name defined twice is an error."""
    text = read(package, filename)
    marks = list(_NAME.finditer(text))
    found: dict[str, str] = {}
    for mark, following in zip(marks, [*marks[1:], None], strict=True):
        end = following.start() if following else len(text)
        name = mark.group(1)
        if name in found:
            raise ValueError(f"{filename}: query {name!r} is defined twice")
        found[name] = text[mark.end() : end].strip().rstrip(";").strip()
    return found
