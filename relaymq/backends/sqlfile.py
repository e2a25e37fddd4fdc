"""SQL lives in files: the one loader for the SQLite and PostgreSQL backends.

A queries file holds blocks that start with ``-- name: <name>``; the comment lines after the
header say what goes in and what comes out. The text before the first header is the file's own
header and is dropped. A migrations folder holds ``NNNN_<what>.sql`` scripts numbered from 0001
without gaps. No SQL lives in Python strings. Files are read once per process.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from types import MappingProxyType

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_\w+\.sql$")


def read(package: str, filename: str) -> str:
    """The text of ``filename`` (a path relative to ``package``'s folder)."""
    return resources.files(package).joinpath(filename).read_text(encoding="utf-8")


@cache
def named_queries(package: str, filename: str) -> Mapping[str, str]:
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
    return MappingProxyType(found)


@cache
def migrations(package: str, folder: str = "migrations") -> tuple[tuple[str, str], ...]:
    """``(name, script)`` of every ``NNNN_*.sql`` file of ``folder``, in order; the name is the
    file's stem. The numbers must run 0001, 0002, ... without gaps."""
    directory = resources.files(package).joinpath(folder)
    files = sorted(f.name for f in directory.iterdir() if _MIGRATION.match(f.name))
    numbers = [int(name[:4]) for name in files]
    if numbers != list(range(1, len(files) + 1)):
        raise ValueError(f"migrations must be numbered 0001, 0002, ... without gaps: {files}")
    return tuple(
        (name.removesuffix(".sql"), directory.joinpath(name).read_text(encoding="utf-8"))
        for name in files
    )
