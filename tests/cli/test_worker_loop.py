"""``relaymq worker --loop``: the worker process runs on the event loop chosen (uvloop's when
installed, by default) and says which in its start line; asking for uvloop where it is not
installed is a clear configuration error."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest
import uvloop

from relaymq import Queue, connect
from relaymq.cli import main
from relaymq.cli.common import ConfigProblem, loop_factory
from tests import tasks
from tests.support.jobs import queue_name

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("choice", "runs_on"), [("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")]
)
async def test_a_worker_process_runs_jobs_on_the_loop_chosen(
    tmp_path: Path, choice: str, runs_on: str
) -> None:
    url, q = f"sqlite:///{tmp_path}/loop.db", queue_name("loop")
    backend = await connect(url)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RELAYMQ_LOOP": choice,
        "RELAYMQ_LOG_LEVEL": "INFO",
    }
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
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        handle = await Queue(q, backend).add(tasks.add.call(2, 3))
        assert await handle.result(timeout=30) == 5
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        await backend.close()
    assert proc.returncode == 0, err.decode()
    assert f"started on {q} (event loop: {runs_on})" in err.decode()


def test_the_choices_give_their_loops() -> None:
    assert loop_factory("asyncio") is None
    assert loop_factory("uvloop") is uvloop.new_event_loop
    assert loop_factory("auto") is uvloop.new_event_loop


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    assert loop_factory("auto") is None
    with pytest.raises(ConfigProblem, match="pip install uvloop"):
        loop_factory("uvloop")
    assert main(["worker", "tests.tasks", "--loop", "uvloop", "--backend", "memory://"]) == 2
    assert "--loop uvloop: uvloop is not installed" in capsys.readouterr().err
