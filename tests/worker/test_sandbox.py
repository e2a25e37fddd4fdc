"""``@task(sandbox=True)``: each attempt runs in a child process of the worker, which a timeout,
a cancel and the worker's shutdown kill for real, and whose crash fails or retries the job with
an error that says how the process died."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from relaymq import JobCancelledError, JobFailedError, Queue, connect
from relaymq.job import JobState
from tests import sandbox_tasks
from tests.conftest import CASES, require
from tests.support.cases import BackendCase
from tests.support.jobs import queue_name
from tests.support.waiting import poll_until
from tests.worker.conftest import RunWorker

ROOT = Path(__file__).resolve().parents[2]
SANDBOX_CASES = [c for c in CASES if c.name in ("memory", "sqlite", "redis", "postgres")]


@pytest.fixture(params=SANDBOX_CASES, ids=[c.name for c in SANDBOX_CASES])
def case(request: pytest.FixtureRequest) -> BackendCase:
    """The sandbox does not depend on the backend: a few backends, not all, for its cost (a
    child process per test)."""
    c: BackendCase = request.param
    require(c)
    return c


def alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def written_pid(pid_file: Path) -> int | None:
    text = pid_file.read_text() if pid_file.exists() else ""
    return int(text) if text else None


async def started_child(pid_file: Path) -> int:
    await poll_until(lambda: written_pid(pid_file) is not None, "the handler to start")
    pid = written_pid(pid_file)
    assert pid is not None and pid != os.getpid() and alive(pid)
    return pid


async def test_a_sandboxed_job_runs_in_a_reused_child_process(
    queue: Queue, run_worker: RunWorker
) -> None:
    async with run_worker() as worker:
        first = await queue.add(sandbox_tasks.whose_pid.call(1, 2))
        total, pid = await first.result(timeout=30)
        second = await queue.add(sandbox_tasks.whose_pid.call(3, 4))
        assert await second.result(timeout=10) == [7, pid]  # the same child, kept
        assert total == 3 and pid != os.getpid() and worker._sandbox.pids() == [pid]
    await poll_until(lambda: not alive(pid), "the child to end with the worker")
    assert worker._sandbox.pids() == []


async def test_the_handlers_exception_is_stored_with_its_traceback(
    queue: Queue, run_worker: RunWorker
) -> None:
    async with run_worker():
        handle = await queue.add(sandbox_tasks.fails.call())
        with pytest.raises(JobFailedError) as failed:
            await handle.result(timeout=30)
    error = failed.value.error or ""
    assert "Traceback" in error and "ValueError: sandbox boom" in error
    assert "sandbox_tasks.py" in error  # the child's own frames


async def test_a_timeout_kills_the_child(
    queue: Queue, run_worker: RunWorker, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    async with run_worker():
        handle = await queue.add(sandbox_tasks.hangs.with_options(timeout=1.0).call(str(pid_file)))
        pid = await started_child(pid_file)
        with pytest.raises(JobFailedError) as failed:
            await handle.result(timeout=30)
        assert "timed out after 1.0s" in (failed.value.error or "")
        await poll_until(lambda: not alive(pid), "the timed-out child to be killed")


async def test_a_cancel_kills_the_child(
    queue: Queue, run_worker: RunWorker, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    async with run_worker():
        handle = await queue.add(sandbox_tasks.hangs.call(str(pid_file)))
        pid = await started_child(pid_file)
        await queue.cancel(handle.id)
        with pytest.raises(JobCancelledError):
            await handle.result(timeout=30)
        await poll_until(lambda: not alive(pid), "the cancelled job's child to be killed")


async def test_shutdown_kills_the_child_and_releases_the_job(
    queue: Queue, run_worker: RunWorker, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    async with run_worker(shutdown_timeout=0.2) as worker:
        handle = await queue.add(sandbox_tasks.hangs.call(str(pid_file)))
        pid = await started_child(pid_file)
    await poll_until(lambda: not alive(pid), "the child to be killed at shutdown")
    job = await handle.job()
    assert job.state is JobState.WAITING and worker._sandbox.pids() == []


@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("exit", "exited with code 3"),
        ("kill", "died with SIGKILL (exit code -9)"),
        ("segv", "died with SIGSEGV (exit code -11)"),
    ],
)
async def test_a_crashed_child_fails_the_attempt_and_the_job_is_retried(
    queue: Queue, run_worker: RunWorker, how: str, says: str
) -> None:
    async with run_worker() as worker:
        handle = await queue.add(sandbox_tasks.crashes.call(how))  # retries=1
        with pytest.raises(JobFailedError) as failed:
            await handle.result(timeout=30)
        assert worker.stats.retried == 1 and worker.stats.failed == 1
    assert says in (failed.value.error or "")
    assert (await handle.job()).attempts == 2


async def test_progress_and_the_job_context_reach_the_child(
    queue: Queue, run_worker: RunWorker
) -> None:
    async with run_worker():
        handle = await queue.add(sandbox_tasks.reports.call(42))
        assert await handle.result(timeout=30) == f"{queue.name}/{handle.id} attempt 1"
    assert (await handle.job()).progress_value() == 42


def test_the_task_option_is_stored_on_the_task() -> None:
    assert sandbox_tasks.hangs.options.sandbox is True
    assert sandbox_tasks.hangs.with_options(timeout=1).options.sandbox is True


async def test_a_sigkilled_worker_leaves_no_child_behind(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    q = queue_name("sandbox")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RELAYMQ_LOG_LEVEL": "WARNING"}
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relaymq",
        "worker",
        "tests.sandbox_tasks",
        "-q",
        q,
        "--backend",
        url,
        cwd=ROOT,
        env=env,
    )
    backend = await connect(url)
    try:
        pid_file = tmp_path / "pid"
        await Queue(q, backend).add(sandbox_tasks.hangs.call(str(pid_file)))
        pid = await started_child(pid_file)
        worker.kill()
        await worker.wait()
        await poll_until(lambda: not alive(pid), "the orphaned child to die with its worker")
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
        await backend.close()
