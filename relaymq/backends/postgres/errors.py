"""Driver errors translated into ``relaymq.errors`` at the backend's boundary."""

from __future__ import annotations

import asyncpg

from relaymq.errors import BackendError, BackendUnavailableError

# SQLSTATE classes and codes that mean "the server is not there right now".
_UNAVAILABLE_STATES = ("08", "57P01", "57P02", "57P03", "53300")


def translate(e: BaseException) -> BackendError:
    """The ``relaymq.errors`` exception for a driver or socket error (raise it ``from e``)."""
    if isinstance(e, OSError | TimeoutError | asyncpg.exceptions.InterfaceError):
        return BackendUnavailableError(f"PostgreSQL unreachable: {e}")
    if isinstance(e, asyncpg.exceptions.PostgresConnectionError):
        return BackendUnavailableError(f"PostgreSQL connection lost: {e}")
    if isinstance(e, asyncpg.PostgresError):
        state = getattr(e, "sqlstate", "") or ""
        if state.startswith(_UNAVAILABLE_STATES):
            return BackendUnavailableError(f"PostgreSQL unavailable: {e}")
        return BackendError(f"PostgreSQL error {state}: {e}")
    return BackendError(f"PostgreSQL driver error: {e!r}")


DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresError,
    asyncpg.exceptions.InterfaceError,
)
"""What ``translate`` handles; catch these at the backend's boundary."""
