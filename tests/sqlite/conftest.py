from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.support.jobs import queue_name

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def q() -> str:
    return queue_name()


class Child:
    """A ``tests.sqlite.procs`` child process with line-based I/O and deadlines."""

    def __init__(self, proc: asyncio.subprocess.Process, role: str) -> None:
        self.proc = proc
        self.role = role

    async def line(self, what: str, deadline: float = 30) -> str:
        assert self.proc.stdout is not None
        try:
            raw = await asyncio.wait_for(self.proc.stdout.readline(), deadline)
        except TimeoutError:
            raise AssertionError(f"{self.role} child: no {what} within {deadline} s") from None
        if not raw:
            err = await self.proc.stderr.read() if self.proc.stderr else b""
            raise AssertionError(f"{self.role} child exited before {what}: {err.decode()}")
        return raw.decode().rstrip("\n")

    async def expect(self, expected: str, deadline: float = 30) -> None:
        got = await self.line(expected, deadline)
        assert got == expected, f"{self.role} child said {got!r}, expected {expected!r}"

    async def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode() + b"\n")
        await self.proc.stdin.drain()

    def kill(self) -> None:
        # A child that has just exited may be reaped before its returncode is set here.
        with contextlib.suppress(ProcessLookupError):
            if self.proc.returncode is None:
                os.kill(self.proc.pid, signal.SIGKILL)


@asynccontextmanager
async def child(role: str, *args: str) -> AsyncIterator[Child]:
    """Start a child; it is killed and reaped on the way out, whatever happened."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.sqlite.procs",
        role,
        *args,
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    c = Child(proc, role)
    try:
        yield c
    finally:
        c.kill()
        await proc.communicate()
