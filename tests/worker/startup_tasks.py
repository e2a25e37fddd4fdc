"""The task that worker processes of the startup and refusal tests run (imported by
``relaymq worker tests.worker.startup_tasks``)."""

from __future__ import annotations

from relaymq import task


@task(queue="startup")
async def echo(value: str) -> str:
    return value
