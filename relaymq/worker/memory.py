"""Memory the worker freed, given back to the system.

glibc's allocator keeps the pages Python frees for its own later use unless they sit at the
top of its heap. A burst (a reconnect after a network cut, with its buffers, retries and
timeouts; a large batch of results) leaves such pages scattered between live ones, and the
worker's resident memory climbs in steps that never come back down, though the memory is
free. Every ``memory_trim_interval`` seconds the worker asks glibc to give back what it can
(``malloc_trim(0)``, a few milliseconds on a worker's heap). Other C libraries (musl, macOS)
have no such call and nothing is done."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
from collections.abc import Callable


def trimmer() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)``, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


class MemoryTrim:
    """Gives freed memory back every ``interval`` seconds, then calls ``trimmed``."""

    def __init__(
        self, interval: float, trim: Callable[[], object], trimmed: Callable[[], None]
    ) -> None:
        self.interval = interval
        self._trim = trim
        self._trimmed = trimmed

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self._trim()
            self._trimmed()
