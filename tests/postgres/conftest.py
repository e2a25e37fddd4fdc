from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.postgres.cluster import Cluster, unavailable
from tests.support.case_postgres import CASE


@pytest.fixture
def postgres_case() -> None:
    """The shared server of the postgres case: fail in CI, skip locally, when absent."""
    from tests.conftest import require

    require(CASE)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A private cluster, started; always stopped and removed afterwards."""
    reason = unavailable()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"private PostgreSQL cluster unavailable in CI: {reason}", pytrace=False)
        pytest.skip(reason)
    c = Cluster()
    try:
        c.init()
        c.start()
        yield c
    finally:
        c.destroy()
