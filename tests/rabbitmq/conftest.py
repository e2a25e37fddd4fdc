from __future__ import annotations

import pytest

from tests.support.jobs import queue_name


@pytest.fixture
def q() -> str:
    return queue_name()
