"""sqlite3 errors translated into ``relaymq.errors`` at the backend's boundary."""

from __future__ import annotations

import sqlite3

from relaymq.errors import BackendError, BackendUnavailableError, CorruptRecordError

# sqlite3 messages that mean "the file cannot be used right now" rather than "bad request".
_UNAVAILABLE = ("locked", "busy", "unable to open", "disk i/o", "readonly", "no such table")
_CORRUPT = ("malformed", "not a database")


def translate(e: sqlite3.Error, path: str) -> BackendError:
    """The ``relaymq.errors`` exception for ``e`` (raise it ``from e``)."""
    message = str(e).lower()
    if any(m in message for m in _CORRUPT):
        return CorruptRecordError(f"{path}: {e}")
    if isinstance(e, sqlite3.OperationalError) and any(m in message for m in _UNAVAILABLE):
        return BackendUnavailableError(f"{path}: {e}")
    return BackendError(f"{path}: {e}")


def reopen_after(e: sqlite3.Error) -> bool:
    """Whether the connection should be reopened: the file went away or failed, not a lock."""
    message = str(e).lower()
    return (
        isinstance(e, sqlite3.OperationalError)
        and any(m in message for m in _UNAVAILABLE)
        and "locked" not in message
        and "busy" not in message
    )
