from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import pytest_asyncio

from relaymq.backends.base import Backend
from relaymq.testing import FakeClock
from tests.support.cases import BackendCase, all_cases

CASES = all_cases()


def require(case: BackendCase) -> None:
    """Fail in CI, skip locally, when a backend's server is not there."""
    reason = case.unavailable()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{case.name} backend unavailable in CI: {reason}", pytrace=False)
    pytest.skip(f"{case.name} backend unavailable: {reason}")


@pytest.fixture(params=CASES, ids=[c.name for c in CASES])
def case(request: pytest.FixtureRequest) -> BackendCase:
    c: BackendCase = request.param
    require(c)
    return c


SHARED = [c for c in CASES if c.url is not None]


@pytest.fixture(params=SHARED, ids=[c.name for c in SHARED])
def shared_case(request: pytest.FixtureRequest) -> BackendCase:
    """Only the backends that several processes can share (cross-process tests)."""
    c: BackendCase = request.param
    require(c)
    return c


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


MakeBackend = Callable[..., Awaitable[Backend]]


@pytest_asyncio.fixture
async def make_backend(case: BackendCase, tmp_path: Path) -> AsyncIterator[MakeBackend]:
    """``await make_backend(clock=None)``: a connected backend on this test's shared state."""
    made: list[Backend] = []

    async def make(clock: FakeClock | None = None) -> Backend:
        b = await case.make(clock, tmp_path)
        made.append(b)
        return b

    yield make
    for b in reversed(made):
        await b.close()


@pytest_asyncio.fixture
async def backend(make_backend: MakeBackend, clock: FakeClock) -> Backend:
    """A connected backend on a test clock."""
    return await make_backend(clock)
