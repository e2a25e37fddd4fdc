"""SQL lives in files: the one loader for the SQLite and PostgreSQL backends.

A queries file holds blocks that start with ``-- name: <name>``; the comment lines after the
header say what goes in and what comes out. A block that starts with ``-- fragment: <name>``
holds text that the queries use as ``<name>`` (a column list written once). The text before the
first header is the file's own header and is dropped. A migrations folder holds
``NNNN_<what>.sql`` scripts numbered from 0001 without gaps. No SQL lives in Python strings.
Files are read once per process.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from types import MappingProxyType

_BLOCK = re.compile(r"^-- (name|fragment): (\w+)\s*$", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_\w+\.sql$")


def read(package: str, filename: str) -> str:
    """The text of ``filename`` (a path relative to ``package``'s folder)."""
    return resources.files(package).joinpath(filename).read_text(encoding="utf-8")


@cache
def _blocks(package: str, filename: str) -> dict[str, dict[str, str]]:
    """``{"name": {...}, "fragment": {...}}``: every block's text by kind and name."""
    text = read(package, filename)
    marks = list(_BLOCK.finditer(text))
    found: dict[str, dict[str, str]] = {"name": {}, "fragment": {}}
    for mark, following in zip(marks, [*marks[1:], None], strict=True):
        end = following.start() if following else len(text)
        kind, name = mark.group(1), mark.group(2)
        if name in found[kind]:
            raise ValueError(f"{filename}: {kind} {name!r} is defined twice")
        found[kind][name] = text[mark.end() : end].strip().rstrip(";").strip()
    return found


@cache
def fragments(package: str, filename: str) -> Mapping[str, str]:
    """``{name: text}`` for every ``-- fragment:`` block of ``filename``."""
    return MappingProxyType(_blocks(package, filename)["fragment"])


@cache
def named_queries(package: str, filename: str) -> Mapping[str, str]:
    """``{name: statement}`` for every ``-- name:`` block of ``filename``, each without its
    trailing semicolon and with each ``<fragment>`` written out. A name defined twice is an
    error."""
    blocks = _blocks(package, filename)

    def written_out(line: str) -> str:
        if line.lstrip().startswith("--"):
            return line
        for fragment, text in blocks["fragment"].items():
            line = line.replace(f"<{fragment}>", text)
        return line

    return MappingProxyType(
        {
            name: "\n".join(map(written_out, statement.splitlines()))
            for name, statement in blocks["name"].items()
        }
    )


@cache
def migrations(package: str, folder: str = "migrations") -> tuple[tuple[str, str], ...]:
    """``(name, script)`` of every ``NNNN_*.sql`` file of ``folder``, in order; the name is the
    file's stem. The numbers start at 0001 and are unique; a number may be missing (one taken
    by a line of work not merged here: migrations are applied by name, so either order is
    fine), but the first must be there."""
    directory = resources.files(package).joinpath(folder)
    files = sorted(f.name for f in directory.iterdir() if _MIGRATION.match(f.name))
    numbers = [int(name[:4]) for name in files]
    if numbers[:1] != [1] or len(set(numbers)) != len(numbers):
        raise ValueError(f"migrations must be numbered 0001, 0002, ..., each once: {files}")
    return tuple(
        (name.removesuffix(".sql"), directory.joinpath(name).read_text(encoding="utf-8"))
        for name in files
    )
