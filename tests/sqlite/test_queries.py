"""Every named SQLite query that returns job rows ("<job>" in queries.sql) lists exactly the
columns records.COLUMNS reads, in that order (a column added to one query but not another was
found only by a failing merge once)."""

from __future__ import annotations

import re

from relaymq.backends.sqlfile import named_queries
from relaymq.backends.sqlite.records import COLUMNS

JOB_LIST = re.compile(r"(?:SELECT|RETURNING)\s+(queue,\s*id,\s*task,.*?)(?:\s+FROM\s|$)", re.S)


def test_every_job_row_query_lists_the_columns_records_read() -> None:
    checked = []
    for name, sql in named_queries("relaymq.backends.sqlite", "queries.sql").items():
        for listed in JOB_LIST.findall(sql):
            columns = tuple(c.strip() for c in listed.split(","))
            assert columns == COLUMNS, f"query {name!r} lists {columns}"
            checked.append(name)
    assert len(checked) >= 8  # the listings, get_jobs, claims, recovery, promotion
