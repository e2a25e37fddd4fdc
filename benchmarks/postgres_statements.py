"""Server cost of the claim statement under the two plan-cache modes, interleaved.

Fills its own schema with a backlog (and completed jobs), ANALYZEs it as autovacuum would,
then times claim(limit=10) -> settle(x10) on two connections that differ only in
``plan_cache_mode``: ``auto`` (PostgreSQL's default: custom plans while they look cheaper,
which on an analyzed table is every call) and ``force_generic_plan`` (what the backend sets).
Prints the median per statement and drops the schema.

    .venv/bin/python benchmarks/postgres_statements.py --url postgresql://postgres@127.0.0.1:5432/relaymq_test
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import asyncpg

from relaymq.backends.postgres import PostgresBackend
from relaymq.backends.postgres.connection import connect_options
from relaymq.backends.postgres.statements import Q
from relaymq.job import NewJob

MODES = ("auto", "force_generic_plan")


async def run(url: str, rounds: int, backlog: int) -> None:
    schema = f"stmt_{uuid.uuid4().hex[:10]}"
    backend = PostgresBackend(url, schema=schema, migrate=True, retention=0)
    await backend.connect()
    cons: dict[str, asyncpg.Connection] = {}
    try:
        for k in range(0, backlog, 10_000):
            n = min(10_000, backlog - k)
            await backend.enqueue([NewJob("s", uuid.uuid4().hex, "t", b"{}") for _ in range(n)])
        opts = backend.options
        for mode in MODES:
            kwargs = connect_options(opts)
            kwargs["server_settings"] |= {"plan_cache_mode": mode}
            cons[mode] = await asyncpg.connect(opts.dsn, **kwargs)
        await cons[MODES[0]].execute(f'ANALYZE "{schema}".relaymq_jobs')
        times: dict[str, dict[str, list[float]]] = {m: {"claim": [], "settle": []} for m in MODES}
        for r in range(rounds):
            for mode, con in cons.items():
                t0 = time.perf_counter()
                rows = await con.fetch(Q["claim"], ["s"], "w", 10, None, 1000, False)
                t1 = time.perf_counter()
                n = len(rows)
                await con.fetch(
                    Q["settle"],
                    [x["queue"] for x in rows],
                    [x["id"] for x in rows],
                    [x["token"] for x in rows],
                    ["complete"] * n,
                    [b"null"] * n,
                    [None] * n,
                    [0.0] * n,
                    None,
                )
                t2 = time.perf_counter()
                if r >= 10:  # past the prepared statement's first runs
                    times[mode]["claim"].append(t1 - t0)
                    times[mode]["settle"].append(t2 - t1)
        for mode, t in times.items():
            print(
                f"{mode:20s} claim p50 {statistics.median(t['claim']) * 1000:.2f} ms   "
                f"settle p50 {statistics.median(t['settle']) * 1000:.2f} ms"
            )
    finally:
        for con in cons.values():
            await con.close()
        await backend.close()
        con = await asyncpg.connect(backend.options.dsn)
        try:
            await con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await con.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--backlog", type=int, default=50_000)
    args = p.parse_args()
    asyncio.run(run(args.url, args.rounds, args.backlog))


if __name__ == "__main__":
    main()
