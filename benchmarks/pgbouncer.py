"""The cost of PostgreSQL through PgBouncer against direct, in one run.

Starts a private PgBouncer (Debian's, default settings; tests/topologies/pgbouncer.py) in
front of the server and times, interleaved round by round on three handles of one schema:
straight to the server, through the pooler in session mode and through it in transaction mode
(``pooler=transaction``: no statement kept prepared, each parsed in the round trip that runs
it). Per round: enqueue of 1 job, enqueue of 100 jobs, claim(limit=10) then settle(x10).
Prints the median wall time per operation and the client's CPU per operation; run it alone
(``flock /tmp/relaymq-bench.lock``). Needs root (PgBouncer runs as user postgres).

    flock /tmp/relaymq-bench.lock .venv/bin/python -m benchmarks.pgbouncer --rounds 300
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg

from relaymq.backends.postgres import PostgresBackend
from relaymq.job import NewJob
from relaymq.records.store import Outcome, Settle
from tests.topologies.pgbouncer import PgBouncer

SERVER = "postgresql://postgres@127.0.0.1:5432"
DATABASE = "relaymq_test"
OPS = ("enqueue 1", "enqueue 100", "claim 10", "settle 10")


async def run(rounds: int) -> None:
    bouncer = PgBouncer(Path(tempfile.mkdtemp(prefix="topo-bench-")), upstream_port=5432)
    bouncer.start()
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    urls = {
        "direct": f"{SERVER}/{DATABASE}?schema={schema}&migrate=true",
        "session": f"{bouncer.url('session')}?schema={schema}&pooler=session",
        "transaction": f"{bouncer.url('transaction')}?schema={schema}&pooler=transaction",
    }
    handles: dict[str, PostgresBackend] = {}
    wall: dict[str, dict[str, list[float]]] = {m: {op: [] for op in OPS} for m in urls}
    cpu: dict[str, dict[str, list[float]]] = {m: {op: [] for op in OPS} for m in urls}
    try:
        for mode, url in urls.items():  # direct first: it migrates the schema
            handles[mode] = PostgresBackend(url, retention=0)
            await handles[mode].connect()
        for r in range(rounds):
            for mode, backend in handles.items():
                q = f"q-{mode}"
                jobs = [NewJob(q, uuid.uuid4().hex, "t", b"{}") for _ in range(101)]
                claimed: list[Settle] = []

                async def enqueue_1(b: PostgresBackend = backend, j: list[NewJob] = jobs) -> None:
                    await b.enqueue(j[:1])

                async def enqueue_100(b: PostgresBackend = backend, j: list[NewJob] = jobs) -> None:
                    await b.enqueue(j[1:])

                async def claim(
                    b: PostgresBackend = backend, q: str = q, c: list[Settle] = claimed
                ) -> None:
                    batch = await b.claim([q], "w", 10)
                    c[:] = [Settle(j.claim, Outcome.COMPLETE) for j in batch.jobs]

                async def settle(b: PostgresBackend = backend, c: list[Settle] = claimed) -> None:
                    await b.settle(c)

                for op, call in zip(OPS, (enqueue_1, enqueue_100, claim, settle), strict=True):
                    w0, c0 = time.perf_counter(), time.process_time()
                    await call()
                    if r >= 10:  # past the first runs (connections, prepared statements)
                        wall[mode][op].append(time.perf_counter() - w0)
                        cpu[mode][op].append(time.process_time() - c0)
        print(f"{rounds} rounds, medians (client CPU per call in brackets)")
        print(f"{'':12s}" + "".join(f"{op:>24s}" for op in OPS))
        for mode in urls:
            cells = [
                f"{statistics.median(wall[mode][op]) * 1000:8.2f} ms "
                f"({statistics.median(cpu[mode][op]) * 1000:5.2f} ms)"
                for op in OPS
            ]
            print(f"{mode:12s}" + "".join(f"{c:>24s}" for c in cells))
    finally:
        for backend in handles.values():
            await backend.close()
        bouncer.stop()
        con = await asyncpg.connect(f"{SERVER}/{DATABASE}")
        try:
            await con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await con.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    asyncio.run(run(args.rounds))


if __name__ == "__main__":
    main()
