"""The soak's one task: it appends a line to this process's ledger before it does anything
else, so the checker sees every execution, even one a SIGKILL cut short."""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

from relaymq import JobContext, task

LEDGER_DIR = Path(os.environ.get("RELAYMQ_SOAK_LEDGER", "."))
WORK = float(os.environ.get("RELAYMQ_SOAK_WORK", "0") or 0)
"""Mean seconds a run awaits (the profile's ``work``); 0: up to 10 ms."""
_fd: int | None = None
runs = 0
"""Runs started in this process."""


def _ledger() -> int:
    global _fd
    if _fd is None:  # one file per process, appended to with single writes
        _fd = os.open(LEDGER_DIR / f"{os.getpid()}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    return _fd


@task(queue="soak", retries=5, backoff=0.02)
async def step(ctx: JobContext, kind: str) -> list[int]:
    """One execution: recorded, then ``flaky`` jobs fail their first attempt, then a short
    await. Returns (attempt, pid): the checker compares the attempt with the job's own."""
    global runs
    runs += 1
    os.write(_ledger(), f"{ctx.job_id} {ctx.attempt} {os.getpid()} {time.time():.4f}\n".encode())
    if kind == "flaky" and ctx.attempt == 1:
        raise RuntimeError("the first attempt of a flaky job fails")
    await asyncio.sleep(random.uniform(0, 2 * WORK) if WORK else random.uniform(0, 0.01))
    return [ctx.attempt, os.getpid()]
