"""What a search of a queue's jobs asks for (``JobFilter``), read from the words an operator
types (``JobFilter.parse``), and the one statement of what a job must be to match
(``JobFilter.matches``): the in-memory backend and the bounded scans apply it as it is, and the
SQL of the SQLite and PostgreSQL backends and MongoDB's filter carry it out on the server.

Argument conditions read the job's payload as JSON (relaymq's default serializer): a payload
that is not JSON matches none of them."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from relaymq.errors import ConfigError
from relaymq.job import Job

_CONDITION = re.compile(r"^(args|kwargs)((?:\.[^.=~]+)*)(=|~)(.*)$", re.DOTALL)
_AGE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True, slots=True)
class ArgMatch:
    """One condition on a job's arguments: the value at ``path`` equals ``value`` (a JSON
    scalar), or (``contains``) its text contains ``value``."""

    path: tuple[str | int, ...]
    """``("kwargs", "email")``, ``("args", 0)``, ``("kwargs", "order", "id")``."""
    value: Any
    contains: bool = False

    @classmethod
    def parse(cls, text: str) -> ArgMatch:
        """``kwargs.customer_id=42``, ``args.0=ada``, ``kwargs.email~@example.com``: a path
        into ``args`` (by position) or ``kwargs`` (by name, then keys of nested objects), then
        ``=`` and a value (a JSON number, string, true, false or null; anything else is a
        string) or ``~`` and a part of the value's text."""
        found = _CONDITION.match(text.strip())
        if found is None:
            raise ConfigError(
                f"{text!r} is not an argument condition: write args.N=VALUE, "
                "kwargs.NAME=VALUE or kwargs.NAME~TEXT"
            )
        root, rest, op, raw = found.groups()
        steps = [s for s in rest.split(".") if s]
        if root == "args":
            if not steps or not steps[0].isdigit():
                raise ConfigError(f"{text!r}: args takes a position first (args.0=...)")
        elif not steps:
            raise ConfigError(f"{text!r}: kwargs takes a name first (kwargs.email=...)")
        path: list[str | int] = [root]
        path += [int(steps[0])] if root == "args" else [steps[0]]
        path += steps[1:]
        if op == "~":
            if not raw:
                raise ConfigError(f"{text!r}: ~ needs some text to look for")
            return cls(tuple(path), raw, contains=True)
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        if isinstance(value, dict | list):
            raise ConfigError(f"{text!r}: compare with a number, a string, true, false or null")
        return cls(tuple(path), value)

    def json_path(self) -> str:
        """The path as SQLite's JSON functions write it: ``$.kwargs.email``, ``$.args[0]``."""
        out = "$"
        for step in self.path:
            out += f"[{step}]" if isinstance(step, int) else "." + json.dumps(step)
        return out

    def found_in(self, arguments: Any) -> bool:
        """Whether decoded ``arguments`` (``{"args": [...], "kwargs": {...}}``) meet it."""
        value = arguments
        for step in self.path:
            if isinstance(step, int) and isinstance(value, list) and -1 < step < len(value):
                value = value[step]
            elif isinstance(step, str) and isinstance(value, dict) and step in value:
                value = value[step]
            else:
                return False
        if self.contains:  # in a string's text or a number's (not true, false, null)
            if not isinstance(value, str | int | float) or isinstance(value, bool):
                return False
            text = value if isinstance(value, str) else json.dumps(value)
            return str(self.value) in text
        if isinstance(value, bool) or isinstance(self.value, bool):
            return value is self.value
        if isinstance(value, str) != isinstance(self.value, str):  # "42" is not 42
            return False
        return bool(value == self.value and not isinstance(value, dict | list))

    @property
    def kind(self) -> str:
        """What the SQL statements compare by: ``has`` (contains), or the value's JSON kind
        (``number``, ``text``, ``true``, ``false``, ``null``)."""
        if self.contains:
            return "has"
        if self.value is True or self.value is False or self.value is None:
            return json.dumps(self.value)
        return "text" if isinstance(self.value, str) else "number"

    def __str__(self) -> str:
        path = ".".join(str(s) for s in self.path)
        if self.contains:
            return f"{path}~{self.value}"
        return f"{path}={json.dumps(self.value)}"


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Conditions a listed job meets (``Queue.search``; ``JobStore.list_jobs(where=...)``),
    all of them: its id starts with ``id_prefix``, its task name contains ``task_contains``,
    it was created in ``[created_after, created_before)`` (seconds since the epoch, on the
    backend's clock), and its arguments meet each of ``args``."""

    id_prefix: str | None = None
    task_contains: str | None = None
    created_after: float | None = None
    created_before: float | None = None
    args: tuple[ArgMatch, ...] = ()

    @property
    def empty(self) -> bool:
        return self == JobFilter()

    def matches(self, job: Job) -> bool:
        """The rule every backend follows."""
        if self.id_prefix is not None and not job.id.startswith(self.id_prefix):
            return False
        if self.task_contains is not None and self.task_contains not in job.task:
            return False
        if self.created_after is not None and not job.created_at >= self.created_after:
            return False
        if self.created_before is not None and not job.created_at < self.created_before:
            return False
        if self.args:
            try:
                arguments = json.loads(job.payload)
            except ValueError:
                return False
            return all(a.found_in(arguments) for a in self.args)
        return True

    @classmethod
    def parse(
        cls,
        *,
        id_prefix: str = "",
        task: str = "",
        newer_than: str = "",
        older_than: str = "",
        args: str | Sequence[str] = "",
        now: float,
    ) -> JobFilter:
        """A filter from what an operator typed (empty: no condition): ages like ``90``,
        ``15m``, ``2h``, ``3d`` counted back from ``now``; argument conditions separated by
        spaces or given one per item (``ArgMatch.parse``)."""
        words = args.split() if isinstance(args, str) else list(args)
        return cls(
            id_prefix.strip() or None,
            task.strip() or None,
            None if not newer_than.strip() else now - age(newer_than),
            None if not older_than.strip() else now - age(older_than),
            tuple(ArgMatch.parse(w) for w in words if w.strip()),
        )


def age(text: str) -> float:
    """``90`` or ``90s``, ``15m``, ``2h``, ``3d``, ``1w`` in seconds."""
    found = _AGE.match(text.strip())
    if found is None:
        raise ConfigError(f"{text!r} is not an age: write a number with s, m, h, d or w")
    return float(found.group(1)) * _UNITS[found.group(2)]


def conditions_json(where: JobFilter) -> str | None:
    """``where``'s argument conditions as the SQL statements read them: a JSON array of
    ``[path, kind, value, steps]`` (``ArgMatch.json_path``, ``ArgMatch.kind``, the value, and
    the path's steps as text for PostgreSQL's ``#>``); None without any."""
    if not where.args:
        return None
    return json.dumps(
        [[a.json_path(), a.kind, a.value, [str(s) for s in a.path]] for a in where.args]
    )


_PLAIN = re.compile(r"^[A-Za-z0-9 _.@:+-]+$")
"""Text that every JSON encoder writes as it is inside a string (no escapes, whatever its
options: ASCII only, none of the characters an HTML-safe encoder escapes)."""
_NUMERIC = re.compile(r"^[0-9.eE+-]+$")


def needle(where: JobFilter) -> bytes | None:
    """Bytes that every JSON payload meeting ``where``'s argument conditions contains, the
    longest such run found (None: none known). The SQL statements look for it in the stored
    payload before they read the payload as JSON, so a search reads only the rows that may
    match: it narrows, ``matches`` decides.

    Each condition offers its value as any encoder writes it: a string ``"ada"``, ``true``,
    ``false``, ``null``, an integer's digits (below 10**15, where every encoder writes an
    integral number with them), and a ``~`` text that only a string can hold (a number's text
    is what ``json.dumps`` makes of it, which the stored payload need not spell alike). A value
    tells jobs apart better than a key most jobs have: a key (``"email"``) is the needle only
    when no value is plain."""
    values: list[str] = []
    keys: list[str] = []
    for a in where.args:
        last, value = a.path[-1], a.value
        if isinstance(last, str) and _PLAIN.match(last):
            keys.append(f'"{last}"')
        if a.contains:
            if _PLAIN.match(str(value)) and not _NUMERIC.match(str(value)):
                values.append(str(value))
        elif value is None or isinstance(value, bool):
            values.append(json.dumps(value))
        elif isinstance(value, int) and abs(value) < 10**15:
            values.append(str(value))
        elif isinstance(value, str) and _PLAIN.match(value):
            values.append(f'"{value}"')
    found = values or keys
    return max(found, key=len).encode() if found else None


def search(where: JobFilter) -> tuple[str | float | bytes | None, ...]:
    """``where`` as the parameters of the SQL statements that search (after their own): the
    id prefix, the part of the task name, the two creation bounds, ``conditions_json`` and
    the ``needle`` of its argument conditions."""
    return (
        where.id_prefix,
        where.task_contains,
        where.created_after,
        where.created_before,
        conditions_json(where),
        needle(where),
    )
