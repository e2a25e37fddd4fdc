"""Tasks that run in a sandbox (a child process of the worker), for tests/worker/test_sandbox.py.

They live in their own importable module: the child finds a task by its name, as a worker does.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path

from relaymq import JobContext, task


@task(queue="tests", sandbox=True)
async def whose_pid(a: int, b: int) -> list[int]:
    """The sum, and the process that computed it."""
    return [a + b, os.getpid()]


@task(queue="tests", sandbox=True)
def fails() -> None:
    raise ValueError("sandbox boom")


@task(queue="tests", sandbox=True)
def hangs(pid_file: str) -> None:
    """Writes its process id, then never returns on its own (a plain function: a thread could
    not be stopped; the sandbox's process can)."""
    Path(pid_file).write_text(str(os.getpid()))
    while True:
        time.sleep(1)


@task(queue="tests", sandbox=True, retries=1)
def crashes(how: str) -> None:
    if how == "exit":
        os._exit(3)
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "segv":
        ctypes.string_at(0)  # reads address 0


@task(queue="tests", sandbox=True)
async def reports(ctx: JobContext, value: int) -> str:
    ctx.progress(value)
    return f"{ctx.queue}/{ctx.job_id} attempt {ctx.attempt}"
