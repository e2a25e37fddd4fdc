"""Serializers turn task arguments and results into bytes and back. JSON (orjson) by default."""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from relaymq.errors import SerializationError


class Serializer(Protocol):
    def dumps(self, value: Any) -> bytes: ...
    def loads(self, data: bytes) -> Any: ...


class JSONSerializer:
    """orjson: strict UTF-8 (lone surrogates are rejected), NUL characters round-trip."""

    def dumps(self, value: Any) -> bytes:
        try:
            return orjson.dumps(value)
        except TypeError as e:  # orjson.JSONEncodeError subclasses TypeError
            raise SerializationError(f"cannot serialize {_describe(value)}: {e}") from e

    def loads(self, data: bytes) -> Any:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise SerializationError(f"cannot decode payload: {e}") from e


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


DEFAULT_SERIALIZER: Serializer = JSONSerializer()
