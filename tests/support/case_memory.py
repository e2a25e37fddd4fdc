from __future__ import annotations

from pathlib import Path

from relaymq.backends.base import Backend
from relaymq.backends.memory import InMemoryBackend
from relaymq.records.store import Clock
from tests.support.cases import BackendCase

_shared: dict[Path, InMemoryBackend] = {}


async def make(clock: Clock | None, tmp: Path) -> Backend:
    # One process, one state: a second handle in the same test is the same instance.
    return _shared.setdefault(tmp, InMemoryBackend(clock=clock))


CASE = BackendCase(name="memory", make=make)
