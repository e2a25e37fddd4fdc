"""``relaymq dashboard``: a process serving the dashboard over a backend URL; the refusals
(a public address without a secret, a bad URL, a server that is not there) exit with their
codes and serve nothing."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from relaymq import Queue, connect
from relaymq.cli import main
from tests import tasks
from tests.cli.test_metrics_port import free_port
from tests.support.jobs import queue_name
from tests.support.waiting import poll_until

ROOT = Path(__file__).resolve().parents[2]


def fetch(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""
    except (urllib.error.URLError, ConnectionError):
        return 0, ""  # not serving yet


async def test_a_dashboard_process_serves_the_queues_of_a_backend(tmp_path: Path) -> None:
    url, q, port = f"sqlite:///{tmp_path}/d.db", queue_name("dash"), free_port()
    backend = await connect(url)
    await Queue(q, backend).add(tasks.add.call(1, 2))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RELAYMQ_DASHBOARD_TOKEN": "t0ken"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relaymq",
        "dashboard",
        "--backend",
        url,
        "--port",
        str(port),
        cwd=ROOT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:

        async def serving() -> bool:
            return (await asyncio.to_thread(fetch, base + "/", "t0ken"))[0] == 200

        await poll_until(serving, "the dashboard answering", within=20)
        _, page = await asyncio.to_thread(fetch, base + "/", "t0ken")
        assert f'data-count="{q}:waiting">1<' in page
        assert (await asyncio.to_thread(fetch, base + "/dlq"))[0] == 200  # the login form
        assert (await asyncio.to_thread(fetch, base + "/metrics"))[0] == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        await backend.close()


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--host", "0.0.0.0", "--backend", "memory://"], 2, "not a loopback address"),
        (["--backend", "nosuch://x"], 2, "nosuch"),
        (["--backend", "redis://127.0.0.1:1/0"], 3, "127.0.0.1:1"),
    ],
)
def test_refusals_exit_with_their_codes(
    args: list[str], code: int, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dashboard", "--port", str(free_port()), *args]) == code
    assert says in capsys.readouterr().err
