"""What a transactional enqueue costs through Django's tasks backend (``relaymq.contrib.django``),
the Django row beside ``benchmarks.transactions``' drivers.

``--jobs`` jobs, each in a ``transaction.atomic()`` block of its own holding the application's
INSERT and ``task.enqueue()`` (through Django's own connection), beside two baselines in the
same run: the same block without the enqueue, and ``task.enqueue()`` outside any atomic block
(relaymq's own connection, committed at once). The job's part is the difference between the
two atomic figures. Django's database is relaymq's backend too: a new SQLite file, or a new
database on the PostgreSQL server (dropped at the end). Medians of ``--runs``; wall time and
this process's CPU time per job (the database server's own time is not in it).

Django 6 needs Python >= 3.12: run it in the Django tests' virtualenv (``make django`` makes
``.venv-django``):

    flock /tmp/relaymq-bench.lock .venv-django/bin/python -m benchmarks.transactions_django \\
        --jobs 10000 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import relaymq
from relaymq.backends import connect
from relaymq.job import NewJob

SERVER = os.environ.get("RELAYMQ_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432")
ENGINES = ("sqlite", "postgres")


def timed(n: int, one: Callable[[int], object]) -> tuple[float, float]:
    """(wall, CPU) microseconds per call of ``one(i)``, ``i`` in ``range(n)``."""
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        one(i)
    return (
        (time.perf_counter() - wall) / n * 1e6,
        (time.process_time() - cpu) / n * 1e6,
    )


def database(engine: str) -> tuple[dict[str, Any], str, Callable[[], None]]:
    """Django's ``DATABASES["default"]``, the relaymq URL of the same database, and what
    removes it."""
    if engine == "sqlite":
        path = Path(tempfile.mkdtemp(prefix="relaymq-bench-django-")) / "bench.db"
        return (
            {"ENGINE": "django.db.backends.sqlite3", "NAME": str(path)},
            (f"sqlite:///{path}"),
            lambda: None,
        )
    import psycopg

    name = f"relaymq_bench_django_{os.getpid()}"
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as con:
        con.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as con:
            con.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    parts = urlsplit(SERVER)
    settings = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": parts.username or "postgres",
        "HOST": parts.hostname or "127.0.0.1",
        "PORT": str(parts.port or 5432),
    }
    return settings, f"{SERVER}/{name}?migrate=true", drop


BACKLOG = 20_000
"""Jobs put in another queue first: a database in use, not a table just made (PostgreSQL plans
a connection's prepared statements for the table it sees then, and keeps the plans for
asyncpg's statement lifetime, 300 s)."""


async def fill(url: str) -> None:
    backend = await connect(url)
    try:
        jobs = [NewJob("backlog", uuid.uuid4().hex, "bench:noop", b"{}") for _ in range(BACKLOG)]
        for at in range(0, BACKLOG, 1000):
            await backend.enqueue(jobs[at : at + 1000])
    finally:
        await backend.close()


async def waiting(url: str) -> int:
    """The jobs waiting in the queue (every job enqueued: a check that the figures count
    enqueues that happened)."""
    backend = await connect(url)
    try:
        return (await relaymq.Queue("default", backend).counts())[relaymq.JobState.WAITING]
    finally:
        await backend.close()


def never_run(n: int) -> None:
    """The task enqueued (Django wants its function at module level); no worker runs it."""


def measure(engine: str, jobs: int, runs: int) -> list[str]:
    """This engine's rows (one process per engine: Django is configured once)."""
    import django
    from django.conf import settings

    db, url, drop = database(engine)
    settings.configure(
        INSTALLED_APPS=["relaymq.contrib.django"],
        USE_TZ=True,
        DATABASES={"default": db},
        TASKS={"default": {"BACKEND": "relaymq.contrib.django.RelayMQBackend",
                           "OPTIONS": {"URL": url}}},
    )  # fmt: skip
    django.setup()
    from django.db import connection, transaction
    from django.tasks import task, task_backends

    noop = task(never_run)

    def insert(n: int) -> None:
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO bench_orders (n) VALUES (%s)", [n])

    def atomic(n: int) -> None:
        with transaction.atomic():
            insert(n)

    def atomic_with_job(n: int) -> None:
        with transaction.atomic():
            insert(n)
            noop.enqueue(n)

    def no_transaction(n: int) -> None:
        noop.enqueue(n)

    try:
        asyncio.run(fill(url))
        with connection.cursor() as cursor:
            cursor.execute("CREATE TABLE bench_orders (n integer)")
        for warm in (no_transaction, atomic, atomic_with_job):  # tables, connections, caches
            timed(20, warm)
        figures: dict[str, list[tuple[float, float]]] = {"none": [], "tx": [], "job": []}
        for _ in range(runs):
            figures["none"].append(timed(jobs, no_transaction))
            figures["tx"].append(timed(jobs, atomic))
            figures["job"].append(timed(jobs, atomic_with_job))
        stored = asyncio.run(waiting(url))
        if stored != 2 * (20 + runs * jobs):
            raise SystemExit(f"{engine}: {stored} jobs stored, {2 * (20 + runs * jobs)} enqueued")
    finally:
        task_backends["default"].close()
        drop()

    def median(key: str) -> tuple[float, float]:
        return (
            statistics.median(w for w, _ in figures[key]),
            statistics.median(c for _, c in figures[key]),
        )

    none, tx, job = median("none"), median("tx"), median("job")
    part = (job[0] - tx[0], job[1] - tx[1])
    label = {"sqlite": "SQLite", "postgres": "PostgreSQL"}[engine]
    cells = " | ".join(f"{w:.0f} / {c:.0f}" for w, c in (none, tx, job, part))
    return [f"| {label} | Django `transaction.atomic()` | {cells} |"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engine", choices=[*ENGINES, "both"], default="both")
    a = parser.parse_args()
    if a.engine != "both":
        print("\n".join(measure(a.engine, a.jobs, a.runs)))
        return
    print(f"{a.jobs} jobs, median of {a.runs} runs; microseconds per job, wall / CPU")
    print("| backend | driver | `task.enqueue()`, no transaction | atomic, no job |"
          " atomic with the job | the job's part |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- |")
    for engine in ENGINES:  # a process each: Django is configured once per process
        argv = [sys.executable, "-m", "benchmarks.transactions_django", "--engine", engine]
        argv += ["--jobs", str(a.jobs), "--runs", str(a.runs)]
        subprocess.run(argv, check=True)


if __name__ == "__main__":
    main()
