"""PyMongo errors translated into ``relaymq.errors`` at the backend's boundary."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from bson.errors import BSONError
from pymongo.errors import (
    BulkWriteError,
    ConnectionFailure,
    DocumentTooLarge,
    OperationFailure,
    PyMongoError,
)

from relaymq.errors import (
    BackendError,
    BackendUnavailableError,
    CorruptRecordError,
    RecordRefusedError,
    RelayError,
)

P = ParamSpec("P")
R = TypeVar("R")

TOO_LARGE_CODES = frozenset({10334, 17419, 17420})
"""The server's codes for a document over its size limit (BSONObjectTooLarge, and an update
whose resulting document would be)."""


def too_large(e: Exception) -> bool:
    """Whether ``e`` refused a document for its size (the driver's check or the server's)."""
    if isinstance(e, DocumentTooLarge):
        return True
    if isinstance(e, BulkWriteError):
        return any(w.get("code") in TOO_LARGE_CODES for w in e.details.get("writeErrors", ()))
    return isinstance(e, OperationFailure) and e.code in TOO_LARGE_CODES


def size_error(e: Exception) -> RecordRefusedError:
    """A refusal for size: the same document is refused again on every retry."""
    return RecordRefusedError(
        f"a document is over MongoDB's document size limit (16 MiB per job, payload and "
        f"result included; keep max_payload_bytes and max_result_bytes below it): {e}"
    )


_REFUSED_CODES = (13, 18, 85, 86)
"""Unauthorized, AuthenticationFailed, IndexOptionsConflict, IndexKeySpecsConflict."""


def refused(e: OperationFailure) -> bool:
    """Whether the server refuses this backend as configured at connect (bad credentials, no
    permission, an index of the same name with other options): trying again cannot help."""
    return e.code in _REFUSED_CODES or "authentication failed" in str(e).lower()


def translated(fn: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Driver errors become ``relaymq.errors`` at the boundary (the cause is kept)."""

    @functools.wraps(fn)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except RelayError:
            raise
        except ConnectionFailure as e:  # refused, reset, timed out, no server selected
            where = getattr(args[0], "where", "") if args else ""
            reason = str(e).split(", Topology Description")[0]  # the rest is a driver dump
            raise BackendUnavailableError(
                f"MongoDB server {where} unreachable: {reason}".replace("  ", " ")
            ) from e
        except DocumentTooLarge as e:  # a BSONError too, but ours, not the server's
            raise size_error(e) from e
        except BSONError as e:
            raise CorruptRecordError(f"MongoDB returned an unreadable document: {e}") from e
        except PyMongoError as e:
            if too_large(e):
                raise size_error(e) from e
            raise BackendError(f"MongoDB error: {e}") from e

    return call
