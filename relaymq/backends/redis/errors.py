"""Driver exceptions translated into ``relaymq.errors`` at the backend's boundary."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from redis import exceptions as rex

from relaymq.errors import BackendError, BackendUnavailableError, ConfigError

UNAVAILABLE = (
    rex.ConnectionError,  # includes BusyLoadingError: a restarted server still reading its AOF
    rex.TimeoutError,
    rex.ClusterDownError,
    rex.TryAgainError,
    rex.MasterDownError,
    rex.RedisClusterException,
    OSError,
)


def translate(e: BaseException, what: str) -> BackendError | None:
    """The ``relaymq.errors`` exception for a driver exception (raise it ``from e``), or None
    for any other exception (raise ``e`` itself)."""
    if isinstance(e, UNAVAILABLE):
        return BackendUnavailableError(f"Redis unreachable ({what}): {_named(str(e))}")
    if isinstance(e, rex.RedisError):
        return BackendError(f"Redis failed ({what}): {e}")
    return None


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """Driver exceptions become ``relaymq.errors`` (the driver's stays as ``__cause__``)."""
    try:
        yield
    except (*UNAVAILABLE, rex.RedisError) as e:
        raise (translate(e, what) or e) from e


def refused(e: BaseException) -> ConfigError | None:
    """The ``ConfigError`` for a connection the server refuses as configured (bad
    credentials, no permission, a TLS certificate not trusted, ``redis+cluster://`` against a
    server that is not a cluster): trying again cannot help. None for any other error."""
    text = str(e)
    if isinstance(e, rex.AuthenticationError | rex.AuthorizationError) or text.startswith(
        ("WRONGPASS", "NOPERM", "NOAUTH")
    ):
        return ConfigError(
            f"Redis refused the connection: {text} (check the user and "
            "password in the URL, and the user's permissions)"
        )
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return ConfigError(
            f"Redis's TLS certificate is not trusted: {_named(text)} (give the file of the "
            "authority that signed it as ssl_ca_certs= in the URL)"
        )
    if isinstance(e, rex.RedisClusterException) and "cluster mode is not enabled" in text.lower():
        return ConfigError(
            f"Redis refused the connection: {text} (redis+cluster:// needs a "
            "Redis Cluster; use redis:// for a single server)"
        )
    return None


@contextlib.contextmanager
def refusing() -> Iterator[None]:
    """While connecting: a refusal of the server's becomes a ``ConfigError`` (the driver's
    exception stays as ``__cause__``); every other exception goes up as it is."""
    try:
        yield
    except Exception as e:
        config = refused(e)
        if config is None:
            raise
        raise config from e


_CLIENT = re.compile(r"<redis\.asyncio\.client\.Redis\(<.*?host=([^,]+),port=(\d+),.*?\)>\)>\)>")
"""redis-py's description of a client (a few hundred characters of its settings), as in its
"No master found" error, which has one per sentinel tried."""


def _named(text: str) -> str:
    """``text`` with each client description cut to its address."""
    return _CLIENT.sub(r"sentinel \1:\2", text)


def wrong_type(e: BackendError) -> bool:
    """Whether ``e`` is the server's WRONGTYPE reply (a key holds another type than expected:
    the record is damaged, the server is fine)."""
    return isinstance(e.__cause__, rex.ResponseError) and "WRONGTYPE" in str(e.__cause__)
