"""Serializers turn task arguments and results into bytes and back. JSON (orjson) by default.

The default serializer only takes values that come back as the same type: ``None``, ``bool``,
``int`` (64-bit), finite ``float``, ``str``, ``list`` and ``dict`` with ``str`` keys, nested
freely. Tuples are accepted and come back as lists (as the arguments themselves do). Anything
else (``datetime``, ``date``, ``UUID``, ``Decimal``, enums, dataclasses, sets, ``bytes``, numpy
values, subclasses of ``str``/``int``/...) raises ``SerializationError`` naming where it is,
instead of reaching the handler as a string, a list or ``null``: convert it yourself, e.g.
``when.isoformat()`` and ``datetime.fromisoformat(when)`` in the handler.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import orjson

from relaymq.errors import SerializationError


class Serializer(Protocol):
    def dumps(self, value: Any) -> bytes: ...
    def loads(self, data: bytes) -> Any: ...


_SCALARS = (str, bool, type(None))
_INT_RANGE = range(-(2**63), 2**64)  # what orjson encodes


class JSONSerializer:
    """orjson: strict UTF-8 (lone surrogates are rejected), NUL characters round-trip.

    ``dumps`` refuses any value that would not come back as the same type (module docstring).
    """

    def dumps(self, value: Any) -> bytes:
        _check(value, [])
        try:
            return orjson.dumps(value)
        except TypeError as e:  # orjson.JSONEncodeError subclasses TypeError
            raise SerializationError(f"cannot serialize {_describe(value)}: {e}") from e

    def loads(self, data: bytes) -> Any:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise SerializationError(f"cannot decode payload: {e}") from e


def _check(value: Any, path: list[str | int]) -> None:
    # Exact types, not isinstance: a StrEnum or an IntEnum member would come back as a plain
    # str or int, which is the silent type change this check exists to prevent.
    kind = type(value)
    if kind in _SCALARS:
        return
    if kind is int:
        if value not in _INT_RANGE:
            _refuse(value, path, "an integer beyond 64 bits, which JSON here cannot carry")
        return
    if kind is float:
        if not math.isfinite(value):
            _refuse(value, path, "a float NaN or infinity, which would come back as null")
        return
    if kind is list or kind is tuple:
        for k, item in enumerate(value):
            path.append(k)
            _check(item, path)
            path.pop()
        return
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                _refuse(key, path, f"a {_type_name(key)} dict key (JSON keys are strings)")
            path.append(key)
            _check(item, path)
            path.pop()
        return
    _refuse(value, path, f"a {_type_name(value)}, which JSON would not give back as one")


def _refuse(value: Any, path: list[str | int], why: str) -> None:
    where = _path(path)
    raise SerializationError(
        f"cannot serialize {where} ({_describe(value)}): it is {why}; "
        "pass None, bool, int, float, str, list or dict (with str keys) only, "
        "e.g. convert a datetime with .isoformat() and back with datetime.fromisoformat()"
    )


def _path(path: list[str | int]) -> str:
    """``args[0]``, ``kwargs["when"]``... (the queue serializes ``{"args", "kwargs"}``)."""
    if not path:
        return "the value"
    head, *rest = path
    return str(head) + "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in rest)


def _type_name(value: Any) -> str:
    kind = type(value)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


DEFAULT_SERIALIZER: Serializer = JSONSerializer()
