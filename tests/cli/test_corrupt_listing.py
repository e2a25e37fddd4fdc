"""``job list`` shows a damaged record with the damage named (issue 28, item 11): a record
whose ``created_at`` did not parse was listed with 1970-01-01 and no word, while ``job show``
called it corrupt. SQLite and Redis, through the CLI."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from relaymq import connect
from relaymq.cli import main
from tests.support import case_redis, case_sqlite
from tests.support.jobs import new_job, queue_name


def seed(url: str, q: str) -> None:
    """``ok`` and ``bad`` waiting; ``bad``'s stored record damaged behind the backend's back."""
    corrupt = case_sqlite.corrupt if url.startswith("sqlite") else case_redis.corrupt

    async def go() -> None:
        backend = await connect(url)
        try:
            await backend.enqueue([new_job(q, "ok"), new_job(q, "bad")])
            await corrupt(backend, q, "bad", "field")
        finally:
            await backend.close()

    asyncio.run(go())


def test_job_list_names_the_damage(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    q = queue_name()
    seed(url, q)
    assert main(["job", "list", q, "--backend", url, "--json"]) == 0
    listed = {j["id"]: j for j in orjson.loads(capsys.readouterr().out)}
    assert sorted(listed) == ["bad", "ok"]
    assert "token" in listed["bad"]["corrupt"] and "corrupt" not in listed["ok"]
    assert main(["job", "list", q, "--backend", url]) == 0
    out = capsys.readouterr().out
    [row] = [line for line in out.splitlines() if " bad " in line]
    assert "corrupt" in row, out
