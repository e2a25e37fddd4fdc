"""The demo's tasks. Each writes its side effect to a ledger file, one line per execution,
so the demo can count executions per job across processes (and across a SIGKILL)."""

from __future__ import annotations

import asyncio
import os
import random

from relaymq import JobContext, task

QUEUE = "demo"


def _side_effect(ctx: JobContext) -> None:
    folder = os.environ.get("RELAYMQ_DEMO_LEDGER")
    if folder:
        with open(os.path.join(folder, f"{os.getpid()}.log"), "a") as ledger:
            ledger.write(f"{ctx.job_id} {ctx.attempt} {os.getpid()}\n")


async def _work() -> None:
    await asyncio.sleep(random.uniform(0.01, 0.04))


@task(queue=QUEUE)
async def ok(ctx: JobContext, n: int) -> int:
    """Succeeds at the first attempt."""
    await _work()
    _side_effect(ctx)
    return n


@task(queue=QUEUE, retries=2, backoff=0.2)
async def flaky(ctx: JobContext, n: int) -> int:
    """Fails its first attempt, then succeeds."""
    await _work()
    _side_effect(ctx)
    if ctx.attempt == 1:
        raise ConnectionError(f"flaky job {n}: first attempt fails")
    return n


@task(queue=QUEUE, retries=1, backoff=0.1)
async def doomed(ctx: JobContext, n: int) -> int:
    """Fails every attempt: ends in the DLQ."""
    await _work()
    _side_effect(ctx)
    raise ValueError(f"doomed job {n} always fails")
