"""``relaymq worker --metrics-port``: a worker process serves its metrics and its queues'
gauges over HTTP; a port it cannot bind is a clear configuration error."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from relaymq import Queue, connect
from relaymq.cli import main
from tests import tasks
from tests.support.jobs import queue_name
from tests.support.waiting import poll_until

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return str(r.read().decode())
    except (urllib.error.URLError, ConnectionError):
        return ""  # not serving yet


async def test_a_worker_process_serves_its_metrics(tmp_path: Path) -> None:
    url, q, port = f"sqlite:///{tmp_path}/m.db", queue_name("metrics"), free_port()
    backend = await connect(url)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RELAYMQ_METRICS_PORT": str(port)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relaymq",
        "worker",
        "tests.tasks",
        "-q",
        q,
        "--backend",
        url,
        cwd=ROOT,
        env=env,
    )
    try:
        handle = await Queue(q, backend).add(tasks.add.call(2, 3))
        assert await handle.result(timeout=30) == 5
        completed = (
            f'relaymq_jobs_completed_total{{queue="{q}",task="{tasks.add.name}"}} 1.0',
            f'relaymq_queue_jobs{{queue="{q}",state="completed"}} 1.0',
        )

        async def served() -> bool:
            text = await asyncio.to_thread(scrape, port)
            return all(line in text for line in completed)

        # the gauges are cached for 5 s: a scrape may show the reading from before the job
        await poll_until(served, "the completed job in the worker's metrics", within=20)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        await backend.close()


def test_a_taken_port_is_a_configuration_error(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(
            [
                "worker",
                "tests.tasks",
                "-q",
                queue_name(),
                "--metrics-port",
                str(port),
                "--backend",
                "memory://",
            ]
        )
    assert code == 2
    assert f"cannot serve metrics on port {port}" in capsys.readouterr().err
