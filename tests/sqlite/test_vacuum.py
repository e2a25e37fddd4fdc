"""The SQLite file gives back what retention frees: new files and files made before use
incremental auto-vacuum, so a steady workload under retention reaches a steady file size."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from relaymq.backends.sqlite import SQLiteBackend, eventlog
from relaymq.job import JobState
from relaymq.records.store import Outcome, Settle
from relaymq.testing import FakeClock
from tests.sqlite.test_upgrade import schema_1_file
from tests.support.jobs import get_job, new_job

PAYLOAD = b'{"args":["' + b"x" * 2000 + b'"],"kwargs":{}}'


def size(path: Path, *, wal: bool = False) -> int:
    return os.path.getsize(path) + (os.path.getsize(f"{path}-wal") if wal else 0)


def auto_vacuum(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA auto_vacuum").fetchone()[0])
    finally:
        conn.close()


async def test_a_file_made_before_is_converted_and_keeps_its_jobs(tmp_path: Path, q: str) -> None:
    path = tmp_path / "old.db"
    schema_1_file(path, q)
    assert auto_vacuum(path) == 0
    backend = SQLiteBackend(f"sqlite:///{path}")
    await backend.connect()
    try:
        old = await get_job(backend, q, "old")
        assert old is not None and old.state is JobState.WAITING
    finally:
        await backend.close()
    assert auto_vacuum(path) == 2  # incremental


async def test_a_steady_workload_under_retention_reaches_a_steady_file_size(
    tmp_path: Path, q: str
) -> None:
    path = tmp_path / "steady.db"
    clock = FakeClock()
    backend = SQLiteBackend(f"sqlite:///{path}", clock=clock)
    await backend.connect()
    assert auto_vacuum(path) == 2
    peaks: list[int] = []
    try:
        for round_ in range(4):
            ids = [f"r{round_}-{i}" for i in range(1500)]
            await backend.enqueue([new_job(q, i, payload=PAYLOAD) for i in ids])
            for _ in range(15):
                jobs = (await backend.claim([q], "w", 100)).jobs
                await backend.settle([Settle(j.claim, Outcome.COMPLETE, b"1") for j in jobs])
            peaks.append(size(path, wal=True))
            clock.advance(10)
            assert await backend.clean(q, JobState.COMPLETED, 5) == 1500
    finally:
        await backend.close()
    # The first round grows the file; the next ones reuse (or give back and take again)
    # the pages retention freed, instead of adding their own.
    assert max(peaks[1:]) <= peaks[0] * 1.2, peaks
    assert size(path) < peaks[0] / 2  # the freed pages went back to the system


def event_rows(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
    finally:
        conn.close()


async def test_the_event_log_keeps_recent_events_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A row holds a whole batch (an enqueue of a thousand jobs is one row): kept by count
    # alone, the table grew with the jobs (264 MiB after 500,000 jobs in the benchmark).
    path = tmp_path / "events.db"
    backend = SQLiteBackend(f"sqlite:///{path}")
    await backend.connect()
    try:
        await backend.publish([b"a"])
        await backend.publish([b"b"])
        assert event_rows(path) == 2  # both recent
        monkeypatch.setattr(eventlog, "EVENTS_MAX_AGE", 0.0)
        await backend.publish([b"c"])
        assert event_rows(path) == 1  # the older rows are past the age
    finally:
        await backend.close()
