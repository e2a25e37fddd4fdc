"""RedisBackend across a SIGKILL of its server (RELIABILITY "Server restarts", I9, F9).

A private redis-server with ``appendonly yes``/``appendfsync always`` is killed with SIGKILL
and started again on the same directory; nothing accepted may be lost and the same backend
object (and a worker process) must carry on by itself within 10 s.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from relaymq import JobState, Queue, Settings, Worker
from relaymq.backends.base import Backend
from relaymq.backends.redis import RedisBackend
from relaymq.errors import BackendUnavailableError
from relaymq.records.store import Outcome, Settle
from tests import tasks
from tests.redis.server import PrivateRedis
from tests.support.jobs import get_job, new_job, queue_name
from tests.support.waiting import poll_until, watch

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path) -> Iterator[PrivateRedis]:
    s = PrivateRedis(tmp_path / "redis")
    s.start()
    try:
        yield s
    finally:
        s.kill()


async def back_within(backend: Backend, seconds: float = 10.0) -> int:
    """Calls until the backend answers again; the number of failed calls before it did."""
    failures = 0
    async with asyncio.timeout(seconds):
        while True:
            try:
                await backend.counts("probe")
                return failures
            except BackendUnavailableError:
                failures += 1
                await asyncio.sleep(0.05)


async def resubscribed(backend: Backend, sub: AsyncIterator[bytes]) -> bool:
    """The subscription delivers again (pub/sub loses what is published before it is back)."""
    async with asyncio.timeout(10):
        while True:
            await backend.publish([b"after-restart"])
            try:
                async with asyncio.timeout(0.2):
                    return await anext(sub) == b"after-restart"
            except TimeoutError:
                continue


async def blocked_in_blpop(url: str) -> None:
    """Returns once the server reports a client blocked (our backend's BLPOP: the server is
    private to the test, so no other client blocks on it)."""
    admin = Redis.from_url(url)
    try:

        async def blocked() -> bool:
            return int((await admin.info("clients"))["blocked_clients"]) >= 1

        await poll_until(blocked, "the server to see the wait blocked in BLPOP")
    finally:
        await admin.aclose()


async def test_accepted_jobs_and_claims_survive_a_sigkill(server: PrivateRedis) -> None:
    backend = RedisBackend(server.url)
    await backend.connect()
    q = queue_name("restart")
    try:
        await backend.enqueue([new_job(q, f"w{i}") for i in range(150)])
        await backend.enqueue([new_job(q, f"d{i}", delay=0.2) for i in range(20)])
        claimed = (await backend.claim([q], "w1", 30)).jobs
        sub = await backend.subscribe()
        blocked = asyncio.create_task(backend.wait([q + "-idle"], 30))
        await blocked_in_blpop(server.url)  # the wait is blocked in BLPOP when the server dies
        assert not blocked.done()

        server.kill()
        with pytest.raises(BackendUnavailableError):
            await blocked
        with pytest.raises(BackendUnavailableError):
            await backend.counts(q)
        server.start()

        # The very next call after the server is back works: no reconnect by hand.
        assert await back_within(backend) == 0
        counts = await backend.counts(q)
        assert counts[JobState.ACTIVE] == 30
        assert counts[JobState.WAITING] + counts[JobState.DELAYED] == 140
        stored = await get_job(backend, q, claimed[0].id)
        assert stored is not None and stored.token == claimed[0].token

        # Blocking waits and the subscription come back too.
        await asyncio.wait_for(backend.wait([q], 30), 5)  # work is waiting: returns at once
        assert await resubscribed(backend, sub)
        await sub.aclose()

        # Stalled recovery takes back every job that was active; old claims stay rejected.
        recovered = await backend.recover_stalled(q, threshold=0.0, max_stalled=5)
        assert sorted(recovered.requeued) == sorted(j.id for j in claimed)
        assert await backend.settle([Settle(claimed[0].claim, Outcome.COMPLETE)]) == [False]
        # The delayed jobs fall due on the server clock: an empty claim waits (wait blocks
        # until the first delayed job is due) and claims again.
        done = 0
        try:
            async with asyncio.timeout(10):
                while done < 170:
                    batch = (await backend.claim([q], "w2", 50)).jobs
                    if not batch:
                        await backend.wait([q], 5)
                        continue
                    assert all(j.token >= 1 for j in batch)
                    settled = await backend.settle(
                        [Settle(j.claim, Outcome.COMPLETE) for j in batch]
                    )
                    done += sum(settled)
        except TimeoutError:
            raise AssertionError(f"gave up after 10s with {done} of 170 jobs done") from None
        assert done == 170
        assert (await backend.claim([q], "w2", 50)).jobs == []
        assert (await backend.counts(q))[JobState.COMPLETED] == 170
    finally:
        await backend.close()


async def test_worker_rides_out_a_server_sigkill(server: PrivateRedis, tmp_path: Path) -> None:
    """A worker process keeps running through the restart; every job completes exactly once."""
    backend = RedisBackend(server.url)
    await backend.connect()
    q = queue_name("restart-w")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RELAYMQ_LOG_LEVEL": "WARNING",  # the test reads "settle failed" from the log
        "COLUMNS": "200",  # the log is wrapped to the console's width
        "RELAYMQ_STALLED_THRESHOLD": "1.0",
        "RELAYMQ_HEARTBEAT_INTERVAL": "0.2",
        "RELAYMQ_STALLED_CHECK_INTERVAL": "0.2",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relaymq",
        "worker",
        "tests.tasks",
        "-q",
        q,
        "-c",
        "4",
        "--backend",
        server.url,
        cwd=ROOT,
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    log = WorkerLog(proc.stderr)
    try:
        queue = Queue(q, backend)
        handles = [await queue.add(tasks.blocking_sleep.call(0.3)) for _ in range(12)]
        async with watch(backend) as w:
            await w.until(lambda: _active(backend, q), "the worker to hold some jobs", within=20)
        server.kill()
        # A handler finishes during the outage; its settle must wait for the server.
        await log.until(b"settle failed", "a handler's settle refused during the outage")
        server.start()
        await back_within(backend)
        async with watch(backend) as w:
            await w.until(
                lambda: _completed(backend, q, len(handles)), "every job completed", within=30
            )
        assert proc.returncode is None  # the same worker process did it
        counts = await backend.counts(q)
        assert counts[JobState.COMPLETED] == 12 and sum(counts.values()) == 12
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        await log.close()
        await backend.close()


class WorkerLog:
    """The worker process's log (stderr), read as it comes so the pipe never fills."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.lines: list[bytes] = []
        self._grew = asyncio.Event()
        self._reader = asyncio.create_task(self._read(stream))

    async def _read(self, stream: asyncio.StreamReader) -> None:
        async for line in stream:
            self.lines.append(line)
            self._grew.set()

    async def until(self, text: bytes, what: str, within: float = 10.0) -> None:
        """Returns once a line containing ``text`` was logged; fails naming ``what``."""
        try:
            async with asyncio.timeout(within):
                while not any(text in line for line in self.lines):
                    self._grew.clear()
                    await self._grew.wait()
        except TimeoutError:
            logged = b"".join(self.lines[-20:]).decode(errors="replace")
            message = f"gave up after {within}s waiting for {what}; log:\n{logged}"
            raise AssertionError(message) from None

    async def close(self) -> None:
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)


async def _completed(backend: Backend, q: str, n: int) -> bool:
    return (await backend.counts(q))[JobState.COMPLETED] >= n


async def _active(backend: Backend, q: str) -> bool:
    return (await backend.counts(q))[JobState.ACTIVE] > 0


async def test_in_process_worker_reconnects_after_restart(server: PrivateRedis) -> None:
    backend = RedisBackend(server.url)
    await backend.connect()
    q = queue_name("restart-ip")
    settings = Settings(stalled_threshold=1.0, heartbeat_interval=0.2, stalled_check_interval=0.2)
    worker = Worker(backend, [q], settings=settings)
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.started.wait(), 10)
        queue = Queue(q, backend)
        server.kill()
        server.start()
        await back_within(backend)
        handle = await queue.add(tasks.add.call(2, 3))
        assert await handle.result(timeout=10) == 5  # the idle worker's wait came back
    finally:
        worker.stop()
        await asyncio.wait_for(running, 30)
        await backend.close()
