"""``connect(url)``: pick a backend by URL scheme, importing its driver only when asked for.
(The default backend that tasks enqueue on is the default app's: ``relaymq.app``.)"""

from __future__ import annotations

import importlib
from typing import Any
from urllib.parse import urlsplit

from relaymq.backends.base import Backend
from relaymq.backends.urls import hosts
from relaymq.errors import ConfigError, UnknownBackendError
from relaymq.records.store import Clock

# scheme -> (module, class, extra that installs its driver)
BACKENDS: dict[str, tuple[str, str, str | None]] = {
    "memory": ("relaymq.backends.memory", "InMemoryBackend", None),
    "sqlite": ("relaymq.backends.sqlite", "SQLiteBackend", None),
    "redis": ("relaymq.backends.redis", "RedisBackend", "redis"),
    "rediss": ("relaymq.backends.redis", "RedisBackend", "redis"),
    "redis+cluster": ("relaymq.backends.redis", "RedisBackend", "redis"),
    "rediss+cluster": ("relaymq.backends.redis", "RedisBackend", "redis"),
    "redis+sentinel": ("relaymq.backends.redis", "RedisBackend", "redis"),
    "rediss+sentinel": ("relaymq.backends.redis", "RedisBackend", "redis"),
    "postgresql": ("relaymq.backends.postgres", "PostgresBackend", "postgres"),
    "postgres": ("relaymq.backends.postgres", "PostgresBackend", "postgres"),
    "mongodb": ("relaymq.backends.mongodb", "MongoDBBackend", "mongodb"),
    "amqp": ("relaymq.backends.rabbitmq", "RabbitMQBackend", "rabbitmq"),
    "amqps": ("relaymq.backends.rabbitmq", "RabbitMQBackend", "rabbitmq"),
}


def backend_class(url: str) -> type[Backend]:
    """The backend class for ``url``; a clear error for unknown schemes or missing drivers."""
    scheme = urlsplit(url).scheme.lower() if "://" in url else ""
    if scheme not in BACKENDS:
        supported = ", ".join(f"{s}://" for s in BACKENDS)
        raise UnknownBackendError(
            f"unknown backend URL {url!r}: the scheme must be one of {supported}"
        )
    if scheme not in ("memory", "sqlite"):  # every host:port listed (failover URLs list several)
        hosts(urlsplit(url).netloc, 1, url)
    module_name, class_name, extra = BACKENDS[scheme]
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        if extra is None or e.name == module_name:
            raise
        raise ConfigError(
            f"the {scheme}:// backend needs its driver: pip install 'relaymq[{extra}]'"
        ) from e
    cls: type[Backend] = getattr(module, class_name)
    return cls


def from_url(url: str, *, clock: Clock | None = None, **options: Any) -> Backend:
    """Build (but do not connect) the backend for ``url``."""
    cls = backend_class(url)
    inner = cls.inner_urls(url)
    if inner:  # built over other backends (a broker's metadata store): the options are theirs
        options = {k: from_url(u, clock=clock, **options) for k, u in inner.items()}
    backend: Backend = cls(url, clock=clock, **options)
    return backend


async def connect(url: str, *, clock: Clock | None = None, **options: Any) -> Backend:
    """Build the backend for ``url`` and connect it."""
    backend = from_url(url, clock=clock, **options)
    await backend.connect()
    return backend
