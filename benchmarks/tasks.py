"""The benchmark's job: a no-op, so the figures measure the queue, not the work."""

from __future__ import annotations

from relaymq import task


@task(queue="bench")
async def noop() -> None:
    return None
