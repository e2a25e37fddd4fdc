from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.redis import support as redis_support
from tests.support.case_redis import URL as REDIS_URL


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A backend URL of this test's own: a fresh SQLite file, or a Redis key prefix."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'admin.db'}"
        return
    reason = redis_support.unavailable(REDIS_URL)
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"redis unavailable in CI: {reason}", pytrace=False)
        pytest.skip(reason)
    prefix = redis_support.test_prefix(tmp_path)
    yield f"{REDIS_URL}?prefix={prefix}"
    asyncio.run(redis_support.delete_prefix(REDIS_URL, prefix))
