"""Driver errors translated into ``relaymq.errors`` at the backend's boundary."""

from __future__ import annotations

import asyncpg

from relaymq.errors import BackendError, BackendUnavailableError, ConfigError

# SQLSTATE classes and codes that mean "the server is not there right now": connection
# failures, shutting down, starting up or in recovery (57P03), too many connections, and a
# write on a server still in recovery (25006: a standby, or a primary not promoted yet).
_UNAVAILABLE_STATES = ("08", "57P01", "57P02", "57P03", "53300", "25006")
_NOT_IN_REPERTOIRE = "22021"
"""A text value PostgreSQL cannot hold: in UTF-8, that is a NUL character."""


def translate(e: BaseException, where: str = "") -> BackendError | ConfigError:
    """The ``relaymq.errors`` exception for a driver or socket error (raise it ``from e``);
    ``where`` (``host:port``) names the server. The message always says what happened."""
    at = f" at {where}" if where else ""
    pooled = pooler_problem(e, where)
    if pooled is not None:
        return pooled
    if isinstance(e, TimeoutError):
        return BackendUnavailableError(f"PostgreSQL{at} did not answer in time")
    if isinstance(e, asyncpg.exceptions.TargetServerAttributeNotMatched):
        # every host of a failover URL answered, none as target_session_attrs asks: a
        # replica not promoted yet
        return BackendUnavailableError(f"PostgreSQL{at}: no host is a primary yet ({e})")
    if isinstance(e, OSError | asyncpg.exceptions.InterfaceError):
        return BackendUnavailableError(f"PostgreSQL{at} unreachable: {_reason(e)}")
    if isinstance(e, asyncpg.exceptions.PostgresConnectionError):
        return BackendUnavailableError(f"PostgreSQL{at} connection lost: {_reason(e)}")
    if isinstance(e, asyncpg.PostgresError):
        state = getattr(e, "sqlstate", "") or ""
        if state.startswith(_UNAVAILABLE_STATES):
            return BackendUnavailableError(f"PostgreSQL{at} unavailable: {_reason(e)}")
        if state == _NOT_IN_REPERTOIRE:
            return BackendError(
                f"PostgreSQL{at} refused a text value holding a NUL character "
                "(\\x00), which it cannot store: an id, name, key or error "
                f"text with one cannot be written or looked up ({e})"
            )
        return BackendError(f"PostgreSQL error {state}: {_reason(e)}")
    return BackendError(f"PostgreSQL driver error: {_reason(e)}")


_REFUSED_STATES = ("28", "3D000", "3F000", "42501")
"""At connect: bad credentials (class 28), no such database or schema, no privilege."""


def refused(e: BaseException, where: str = "") -> ConfigError | None:
    """The ``ConfigError`` for a connection the server refuses as configured (trying again
    cannot help), or None: only for errors met while connecting."""
    state = (getattr(e, "sqlstate", "") or "") if isinstance(e, asyncpg.PostgresError) else ""
    pooled = pooler_problem(e, where)
    if pooled is not None:
        return pooled
    if not state.startswith(_REFUSED_STATES):
        return None
    at = f" at {where}" if where else ""
    return ConfigError(
        f"PostgreSQL{at} refused this backend's connection (SQLSTATE {state}): {_reason(e)}; "
        "check the user, password, database and schema in the URL"
    )


def pooler_problem(e: BaseException, where: str = "") -> ConfigError | None:
    """The ``ConfigError`` for what a connection pooler in between refuses (trying again
    cannot help; the URL can), or None.

    - PgBouncer refuses every startup parameter it does not track (``unsupported startup
      parameter: jit``): the URL lacks ``pooler=``;
    - a named prepared statement gone on the next transaction (``prepared statement
      "__asyncpg_stmt_1__" does not exist``): the pooler hands transactions to any server
      connection, so the URL says ``pooler=session`` of a pooler in transaction mode.
    """
    # the first line: asyncpg appends to the second case a hint whose advice
    # (statement_cache_size=0) is not the fix here
    text = next(iter(str(e).strip().splitlines()), "")
    at = f" at {where}" if where else ""
    if isinstance(e, asyncpg.PostgresError) and "unsupported startup parameter" in text:
        return ConfigError(
            f"PostgreSQL{at} refused a connection setting ({text}): a connection pooler "
            "(PgBouncer) is in between; add pooler=transaction (or pooler=session, after its "
            "pool_mode) to the backend URL"
        )
    if isinstance(e, asyncpg.InvalidSQLStatementNameError) and "__asyncpg_" in text:
        return ConfigError(
            f"PostgreSQL{at} lost a prepared statement between two transactions ({text}): "
            "a connection pooler in transaction mode is in between; use pooler=transaction in "
            "the backend URL"
        )
    return None


def _reason(e: BaseException) -> str:
    """``e``'s message, or its type when it has none (never an empty reason)."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.exceptions.TargetServerAttributeNotMatched,
    asyncpg.PostgresError,
    asyncpg.exceptions.InterfaceError,
)
"""What ``translate`` handles; catch these at the backend's boundary."""
