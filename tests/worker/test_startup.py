"""A worker that starts before its backend waits for it, within ``--connect-timeout`` (I12).

Each server is a private instance started a few seconds after the worker (the shared ones are
never stopped): the worker logs one line per attempt while it waits, then runs a job. A worker
whose backend never comes up exits 3 once the timeout has passed; an admin command does not
wait at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from relaymq.backends import connect
from tests.redis.server import PrivateRedis, free_port
from tests.worker import startup_tasks

ROOT = Path(__file__).resolve().parents[2]
TASKS = "tests.worker.startup_tasks"
PYTHONPATH = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT)]))
"""The children import the tasks from this checkout (after any path the test run was given)."""


class WorkerProcess:
    """``relaymq worker`` in a child process, its stderr read line by line."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []

    @classmethod
    async def start(cls, url: str, *args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "relaymq",
            "worker",
            TASKS,
            "-b",
            url,
            *args,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": PYTHONPATH, **(env or {})},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(proc)

    async def line_with(self, text: str, within: float) -> str:
        """The first stderr line containing ``text``, read within ``within`` seconds."""
        assert self.proc.stderr is not None
        try:
            async with asyncio.timeout(within):
                while True:
                    raw = await self.proc.stderr.readline()
                    if not raw:
                        break
                    line = raw.decode(errors="replace").rstrip("\n")
                    self.lines.append(line)
                    if text in line:
                        return line
        except TimeoutError:
            pass
        raise AssertionError(f"no stderr line with {text!r} within {within}s: {self.lines}")

    async def exit_code(self, within: float) -> int:
        """Wait for the process to end (reading the rest of stderr); its exit code."""
        assert self.proc.stderr is not None
        try:
            async with asyncio.timeout(within):
                rest = await self.proc.stderr.read()
                code = await self.proc.wait()
        except TimeoutError:
            raise AssertionError(f"worker still running after {within}s: {self.lines}") from None
        self.lines += rest.decode(errors="replace").splitlines()
        return code

    async def stop(self) -> int:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        return await self.exit_code(30)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()


Server = tuple[str, Callable[[], Awaitable[None]]]
"""A private server not started yet: its URL, and what starts it."""


@contextlib.asynccontextmanager
async def private_postgres(tmp: Path) -> AsyncIterator[Server]:
    from tests.postgres.cluster import Cluster, unavailable

    _skip_unless(unavailable())
    cluster = Cluster()
    await asyncio.to_thread(cluster.init)
    try:
        yield f"{cluster.url}?migrate=true", lambda: asyncio.to_thread(cluster.start)
    finally:
        await asyncio.to_thread(cluster.destroy)


@contextlib.asynccontextmanager
async def private_redis(tmp: Path) -> AsyncIterator[Server]:
    server = PrivateRedis(tmp / "redis")
    try:
        yield f"{server.url}?prefix=startup", lambda: asyncio.to_thread(server.start)
    finally:
        server.kill()


@contextlib.asynccontextmanager
async def private_rabbitmq(tmp: Path) -> AsyncIterator[Server]:
    """A private broker node over a private Redis metadata store (up from the start): the
    broker is the server that comes late."""
    from tests.rabbitmq import node, support

    _skip_unless(node.unavailable())
    store = PrivateRedis(tmp / "store")
    store.start()
    broker = node.PrivateNode()
    try:
        url = support.url(tmp, f"{store.url}?prefix=startup", amqp_url=node.URL)
        yield url, lambda: asyncio.to_thread(broker.start)
    finally:
        await asyncio.to_thread(broker.stop)
        store.kill()


def _skip_unless(reason: str | None) -> None:
    if reason and os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    if reason:
        pytest.skip(reason)


SERVERS = {"postgres": private_postgres, "redis": private_redis, "rabbitmq": private_rabbitmq}


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", SERVERS)
async def test_a_worker_started_before_its_server_waits_and_runs_a_job(
    name: str, tmp_path: Path
) -> None:
    async with SERVERS[name](tmp_path) as (url, start_server):
        worker = await WorkerProcess.start(url, "--connect-timeout", "180")
        try:
            waiting = await worker.line_with("waiting for", within=30)
            assert "next try in" in waiting and "Traceback" not in waiting
            await worker.line_with("waiting for", within=30)  # it goes on trying
            await start_server()
            await worker.line_with("started on startup", within=120)
            backend = await connect(url)
            try:
                handle = await startup_tasks.echo.with_options(backend=backend).enqueue("hi")
                assert await handle.result(timeout=30) == "hi"
            finally:
                await backend.close()
            assert await worker.stop() == 0
        finally:
            worker.kill()
        assert not any("Traceback" in line for line in worker.lines), worker.lines


async def test_a_worker_whose_backend_never_comes_up_exits_3_after_the_timeout() -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"  # nobody listens there
    began = time.monotonic()
    worker = await WorkerProcess.start(url, "--connect-timeout", "2")
    code = await worker.exit_code(within=30)
    took = time.monotonic() - began
    assert code == 3, worker.lines
    assert took >= 2, f"exited after {took:.1f}s, before its --connect-timeout"
    waits = [line for line in worker.lines if "waiting for PostgreSQL at 127.0.0.1:" in line]
    assert waits and all("next try in" in line for line in waits), worker.lines
    assert not any("Traceback" in line for line in worker.lines), worker.lines
    assert worker.lines[-1].startswith("Error: ") and "gave up after waiting 2s" in worker.lines[-1]


async def test_connect_timeout_0_and_admin_commands_fail_at_once() -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    for argv in (["worker", TASKS, "--connect-timeout", "0"], ["stats"]):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "relaymq",
            *argv,
            "-b",
            url,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": PYTHONPATH, "RELAYMQ_CONNECT_TIMEOUT": "60"},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(20):
            _, err = await proc.communicate()
        lines = err.decode().strip().splitlines()
        assert proc.returncode == 3, (argv, lines)
        assert len(lines) == 1 and lines[0].startswith("Error: "), (argv, lines)
        assert "waiting for" not in lines[0]
