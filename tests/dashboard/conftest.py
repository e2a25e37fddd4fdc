"""Fixtures shared by the dashboard's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from relaymq.backends.memory import InMemoryBackend


@pytest_asyncio.fixture
async def memory() -> AsyncIterator[InMemoryBackend]:
    """A connected in-memory backend, for the tests that need no server."""
    b = InMemoryBackend()
    await b.connect()
    yield b
    await b.close()
