"""Child processes for the cross-process tests: ``python -m tests.sqlite.procs ROLE URL ...``.

Each prints ``READY`` once connected; ``claim`` then waits for a line on stdin so that every
child starts claiming at the same moment.

- ``claim URL QUEUE``: claim (limit 5) and complete until the queue is empty; prints the ids.
- ``publish URL N``: publish N events ``{"n": i}``.
- ``enqueue URL QUEUE``: enqueue batches of 20 for ever, printing each batch's ids once accepted.
- ``hold URL QUEUE``: enqueue one job, then open a write transaction by hand, insert a row and
  print ``IN-TRANSACTION`` without committing (the parent kills it there).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys

from relaymq.backends.sqlite import SQLiteBackend
from relaymq.backends.sqlite.ops import Q as QUERIES
from relaymq.job import JobState
from relaymq.records.store import Outcome, Settle
from tests.support.jobs import new_job


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def claim(backend: SQLiteBackend, queue: str) -> None:
    say("READY")
    await asyncio.to_thread(sys.stdin.readline)
    got: list[str] = []
    while True:
        batch = (await backend.claim([queue], f"proc-{id(backend)}", 5)).jobs
        if not batch:
            if (await backend.counts(queue))[JobState.WAITING] == 0:
                break
            continue
        got += [j.id for j in batch]
        await backend.settle([Settle(j.claim, Outcome.COMPLETE, result=b"1") for j in batch])
    say(json.dumps(got))


async def publish(backend: SQLiteBackend, n: int) -> None:
    say("READY")
    await backend.publish([json.dumps({"n": i}).encode() for i in range(n)])
    say("PUBLISHED")


async def enqueue(backend: SQLiteBackend, queue: str) -> None:
    say("READY")
    while True:
        jobs = [new_job(queue) for _ in range(20)]
        await backend.enqueue(jobs)
        say(json.dumps([j.id for j in jobs]))


async def hold(backend: SQLiteBackend, queue: str) -> None:
    accepted = new_job(queue, "accepted")
    await backend.enqueue([accepted])
    say("READY")
    conn = sqlite3.connect(backend.path, isolation_level=None)
    conn.execute(QUERIES["begin_immediate"])
    row = {
        "queue": queue,
        "id": "uncommitted",
        "task": "t",
        "payload": b"",
        "state": "waiting",
        "priority": 0,
        "seq": 10**9,
        "now": 0.0,
        "run_at": None,
        "ttl": None,
        "max_attempts": 1,
        "timeout": None,
        "traceparent": None,
        "depends_on": None,
        "dep_policy": None,
        "pending_deps": None,
        "limit_key": None,
        "sequence": None,
        "seq_failure": None,
    }
    conn.execute(QUERIES["insert_job"], row)
    say("IN-TRANSACTION")
    await asyncio.sleep(120)  # killed long before this ends


async def main(role: str, url: str, *args: str) -> None:
    backend = SQLiteBackend(url)
    await backend.connect()
    try:
        if role == "claim":
            await claim(backend, args[0])
        elif role == "publish":
            await publish(backend, int(args[0]))
        elif role == "enqueue":
            await enqueue(backend, args[0])
        elif role == "hold":
            await hold(backend, args[0])
        else:
            raise SystemExit(f"unknown role {role!r}")
    finally:
        await backend.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
