"""PostgreSQL cannot store a NUL character in text: a value holding one that reaches the
backend is refused in words, not with the driver's raw error (issue 28, item 12)."""

from __future__ import annotations

from pathlib import Path

import pytest

from relaymq.errors import BackendError
from relaymq.job import JobState
from tests.conftest import require
from tests.support.case_postgres import CASE
from tests.support.jobs import get_job, new_job


async def test_a_nul_character_is_refused_in_words(tmp_path: Path) -> None:
    require(CASE)
    b = await CASE.make(None, tmp_path)
    try:
        q = "nul"
        for action in (
            lambda: get_job(b, q, "a\x00b"),
            lambda: b.enqueue([new_job(q, "a\x00b")]),
            lambda: b.enqueue([new_job(q, "ok", task="app:\x00")]),
        ):
            with pytest.raises(BackendError) as caught:
                await action()
            message = str(caught.value)
            assert "NUL character" in message, message
            assert "CharacterNotInRepertoire" not in message, message
        assert await b.counts(q) == dict.fromkeys(JobState, 0)
    finally:
        await b.close()
