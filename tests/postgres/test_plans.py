"""The statements that take a list of job ids look each one up by its key, even in the plan
PostgreSQL makes while the table is still empty.

A connection keeps a statement's generic plan (``force_generic_plan``) for the statement's
lifetime in asyncpg's cache (300 s). Made on an empty table, ``queue = $1 AND id = ANY($2)``
planned as the primary key scanned by queue alone with the ids as a filter: every job of the
queue read per call, so reading a job back after each enqueue took 8 ms once the queue held
20,000 (benchmarks/RESULTS.md, the Django row)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from relaymq.backends.postgres import PostgresBackend
from relaymq.backends.postgres.connection import Q, planner_settings, statements
from tests.support.case_postgres import DATABASE, SERVER, drop_schema, ensure_database

BY_IDS = {  # statement: sample arguments (the plan does not depend on them)
    "get_jobs": "('q', ARRAY['a'])",
    "cancel_jobs": "('q', ARRAY['a'], NULL)",
    "remove_jobs": "('q', ARRAY['a'])",
    "retry_jobs": "('q', ARRAY['a'], NULL)",
    "claim_ids": "(ARRAY[]::text[], ARRAY[]::text[], ARRAY[]::int8[], ARRAY[]::text[], "
    "ARRAY[]::bytea[], ARRAY[]::text[], ARRAY[]::float8[], NULL, ARRAY[]::float8[], "
    "ARRAY[]::int4[], 'q', ARRAY['a'], 'w', 0, 0, 0, '{}', '{}', '1', false, 0)",
    "dependency_states": "('q', ARRAY['a'])",
    "claim_delivered": "('q', ARRAY['a'], ARRAY[1], 'w', NULL, false)",
    "live_deliveries": "('q', ARRAY['a'], ARRAY[1])",
}


@pytest_asyncio.fixture
async def empty(postgres_case: None) -> AsyncIterator[str]:
    """A schema with the backend's tables, no job in them."""
    await ensure_database()
    schema = f"plans_{uuid.uuid4().hex[:12]}"
    b = PostgresBackend(f"{SERVER}/{DATABASE}?schema={schema}&migrate=true")
    await b.connect()
    await b.close()
    yield schema
    await drop_schema(schema)


def scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of ``plan`` that reads relaymq_jobs to find the jobs named (not the one
    that writes them, nor a subquery about each job found, such as its sequence's)."""
    if plan.get("Parent Relationship") == "SubPlan":
        return []
    reads = plan.get("Relation Name") == "relaymq_jobs" and plan["Node Type"] != "ModifyTable"
    found = [plan] if reads else []
    for child in plan.get("Plans", []):
        found += scans(child)
    return found


@pytest.mark.parametrize("name", list(BY_IDS))
async def test_a_statement_by_ids_looks_each_id_up_in_a_plan_made_on_an_empty_table(
    empty: str, name: str
) -> None:
    con = await asyncpg.connect(f"{SERVER}/{DATABASE}", server_settings=planner_settings())
    try:
        async with con.transaction():  # EXPLAIN runs nothing, and this undoes the PREPARE too
            await con.execute(f"PREPARE p AS {statements(empty)[Q[name]]}")
            [row] = await con.fetch(f"EXPLAIN (FORMAT JSON) EXECUTE p{BY_IDS[name]}")
        [explained] = json.loads(row[0])
        found = scans(explained["Plan"])
        assert found, explained
        for node in found:
            assert node["Node Type"] == "Index Scan" and node["Index Name"] == "relaymq_jobs_pkey"
            assert "id = " in node["Index Cond"], node  # the key, not the queue's range
    finally:
        await con.close()


CANDIDATES = {  # statement: sample arguments
    "limits_view": "('q', 0, NULL, 28, ARRAY[]::text[], ARRAY[]::int8[], ARRAY[]::text[])",
    "keyed_candidates": "('q', ARRAY['k'], 28, ARRAY[]::text[], ARRAY[]::text[], "
    "ARRAY[]::int8[], ARRAY[]::text[], true)",
}


@pytest.mark.parametrize("name", list(CANDIDATES))
async def test_the_keys_a_claim_leaves_out_are_looked_up_once_per_claim_not_per_job(
    empty: str, name: str
) -> None:
    """A job's key is looked up in a hashed set of the keys left out (at their cap, or had
    their fair turn): a subplan run again for each job read made a fair claim's first page
    read the round's whole map for every job of a turned key it passed over."""
    con = await asyncpg.connect(f"{SERVER}/{DATABASE}", server_settings=planner_settings())
    try:
        async with con.transaction():
            await con.execute(f"PREPARE p AS {statements(empty)[Q[name]]}")
            rows = await con.fetch(f"EXPLAIN EXECUTE p{CANDIDATES[name]}")
        plan = "\n".join(r[0] for r in rows)
        assert "limit_key" in plan and "NOT (hashed SubPlan" in plan, plan
        assert not re.search(r"limit_key IS NULL\) OR \(NOT \(SubPlan", plan), plan
    finally:
        await con.close()
