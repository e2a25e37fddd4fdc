from __future__ import annotations

import pytest

from tests.support.jobs import queue_name


@pytest.fixture
def q() -> str:
    """A queue name no other test uses."""
    return queue_name()
