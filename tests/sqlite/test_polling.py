"""wait() polls the file: an idle worker's repeated waits must back off to ``poll_max``."""

from __future__ import annotations

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
