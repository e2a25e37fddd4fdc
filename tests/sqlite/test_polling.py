"""wait() and subscribe() poll the file: idle polling backs off, the events table stays small."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from relaymq.backends.sqlite import SQLiteBackend, ops
from tests.support.case_sqlite import url


async def test_idle_waits_back_off_across_calls(
    tmp_path: Path, q: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    probes = 0
    real = ops.wait_probe

    def counting(*args: Any) -> tuple[bool, float | None]:
        nonlocal probes
        probes += 1
        return real(*args)

    monkeypatch.setattr(ops, "wait_probe", counting)
    backend = SQLiteBackend(url(tmp_path) + "?poll_max=0.1")
    await backend.connect()
    try:
        warm_up = time.monotonic() + 0.5  # 5, 10, 20, 40, 80 ms, then the 100 ms cap
        while time.monotonic() < warm_up:
            await backend.wait([q], 0.1)  # a worker calls wait() again and again when idle
        probes = 0
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            await backend.wait([q], 0.1)
        assert probes <= 12, f"{probes} probes in 1 s with poll_max = 0.1 s"
    finally:
        await backend.close()


async def test_publish_trims_old_events_in_the_same_call(tmp_path: Path) -> None:
    backend = SQLiteBackend(url(tmp_path) + "?events_keep=5")
    await backend.connect()
    sub = await backend.subscribe()
    try:
        for i in range(4):
            await backend.publish([f"{i}-{k}".encode() for k in range(5)])
        with sqlite3.connect(backend.path) as conn:
            (kept,) = conn.execute("SELECT count(*) FROM events").fetchone()
        conn.close()
        assert kept == 5
        await backend.publish([b"last"])
        # A subscriber that fell behind past the trim skips what is gone and keeps going.
        got = [await asyncio.wait_for(anext(sub), 5) for _ in range(5)]
        assert got[-1] == b"last"
    finally:
        await sub.aclose()
        await backend.close()
