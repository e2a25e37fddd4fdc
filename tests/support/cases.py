"""The backends every contract and worker test runs against, one ``BackendCase`` each.

A case knows how to tell whether its server is there, how to build a fresh, isolated backend
for one test (with a test clock) and, for durable backends, the URL another process would use.
Add a backend by writing ``tests/support/case_<name>.py`` with a ``CASE`` and listing it here.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from relaymq.backends.base import Backend
from relaymq.records.store import Clock

CASE_MODULES = [
    "memory",
    "sqlite",
    "postgres",
    "redis",
    "redis_cluster",
    "rabbitmq_sqlite",
    "rabbitmq_redis",
    "rabbitmq_postgres",
    "mongodb",
]


Damage = Literal["field", "state"]
"""How ``BackendCase.corrupt`` damages a job: ``field``, a field of the record no longer parses
(each backend's own choice of field); ``state``, the state becomes ``bogus``."""

BOGUS_STATE = "bogus"


class Corrupt(Protocol):
    def __call__(
        self, backend: Backend, queue: str, job_id: str, damage: Damage = "field"
    ) -> Awaitable[None]: ...


@dataclass(frozen=True)
class BackendCase:
    name: str
    make: Callable[[Clock | None, Path], Awaitable[Backend]]
    """Build and connect a backend isolated from other tests; ``Path`` is the test's tmp dir.
    Calling it twice in one test gives two handles on the SAME state (two clients)."""
    unavailable: Callable[[], str | None] = lambda: None
    """None when the server is reachable, else the reason."""
    corrupt: Corrupt | None = None
    """Damage the stored record of a job in this backend's own storage, behind the backend's
    back (bad-input tests; ``Damage`` says how). None: the storage cannot be damaged from
    outside (process memory)."""
    url: Callable[[Path], str] | None = None
    """The URL other processes use to reach the same state (cross-process tests)."""


def all_cases() -> list[BackendCase]:
    only = os.environ.get("RELAYMQ_TEST_BACKENDS")
    names = only.split(",") if only else CASE_MODULES
    return [importlib.import_module(f"tests.support.case_{n}").CASE for n in names]
