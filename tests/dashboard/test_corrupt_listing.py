"""A queue page names the damage of a record it lists with stand-in values (issue 28, item
11), as ``job list`` does. On SQLite, whose file can be damaged from outside."""

from __future__ import annotations

from pathlib import Path

from tests.dashboard.support import client
from tests.support import case_sqlite
from tests.support.jobs import new_job, queue_name


async def test_a_queue_page_names_a_damaged_record(tmp_path: Path) -> None:
    backend = await case_sqlite.make(None, tmp_path)
    q = queue_name()
    try:
        await backend.enqueue([new_job(q, "ok"), new_job(q, "bad")])
        await case_sqlite.corrupt(backend, q, "bad", "field")
        async with client(backend) as c:
            page = (await c.get(f"/queues/{q}?state=waiting")).text
    finally:
        await backend.close()
    [row] = [r for r in page.split("<tr>") if ">bad</a>" in r]
    assert "corrupt record: token is" in row.replace("&#39;", "'"), row
