"""PyMongo errors translated into ``relaymq.errors`` at the backend's boundary."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from bson.errors import BSONError
from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError

from relaymq.errors import BackendError, BackendUnavailableError, CorruptRecordError, RelayError

P = ParamSpec("P")
R = TypeVar("R")


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
        except BSONError as e:
            raise CorruptRecordError(f"MongoDB returned an unreadable document: {e}") from e
        except PyMongoError as e:
            raise BackendError(f"MongoDB error: {e}") from e

    return call
