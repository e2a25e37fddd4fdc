"""``relaymq worker MODULE``: the module is always imported first (its folder on ``sys.path``),
``-q`` only narrows the queues; a module that does not import is one clear line, exit 2."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from relaymq import Queue, Schedules, connect
from relaymq.app import default_app
from relaymq.cli import main
from relaymq.options import Options
from relaymq.schedules import store
from relaymq.task import Task
from tests.support.jobs import queue_name

ROOT = Path(__file__).resolve().parents[2]


async def _charge(amount: int) -> int:
    return amount * 2


async def _total(a: int, b: int) -> int:
    return a + b


async def test_with_q_the_module_is_imported_its_tasks_schedules_and_limits_stored(
    tmp_path: Path,
) -> None:
    q = queue_name("billing")
    (tmp_path / "billing_tasks_28.py").write_text(
        textwrap.dedent(f"""
        import relaymq
        from relaymq import task

        relaymq.limit({q!r}, max_active=3)

        @task("billing.charge", queue={q!r})  # a name that is not its import path
        async def charge(amount: int) -> int:
            return amount * 2

        @task("billing.sweep", queue={q!r}, every=3600)
        async def sweep() -> None: ...
        """)
    )
    url = f"sqlite:///{tmp_path}/w.db"
    backend = await connect(url)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RELAYMQ_LOG_LEVEL": "INFO"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relaymq",
        "worker",
        "billing_tasks_28",
        "-q",
        q,
        "--backend",
        url,
        cwd=tmp_path,
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        charge: Task[[int], int] = Task(_charge, "billing.charge", Options(queue=q), False)
        handle = await Queue(q, backend).add(charge.call(21))
        assert await handle.result(timeout=30) == 42
        assert await Queue(q, backend).limits() is not None
        stored = [s.id for s in await store.load(backend)]
        assert "billing.sweep" in stored
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        await backend.close()
    assert proc.returncode == 0, err.decode()


def test_with_q_the_module_is_imported_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "marker_tasks_28.py").write_text(
        "from relaymq import task\n\n@task('marker.t28', queue='m28')\ndef t() -> None: ...\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    # the backend URL is refused after the import: the task is registered all the same
    assert main(["worker", "marker_tasks_28", "-q", "m28", "--backend", "nosuch://"]) == 2
    assert "marker.t28" in default_app().tasks
    capsys.readouterr()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("x = (\n", "broken_tasks_28.py, line 1"),
        ("import relaymq\n\nraise RuntimeError('no config')\n", "broken_tasks_28.py, line 3"),
        ("import no_such_dependency_28\n", "broken_tasks_28.py, line 1"),
    ],
    ids=["syntax", "raises", "missing-dependency"],
)
def test_a_module_that_does_not_import_is_one_line_exit_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    source: str,
    expected: str,
) -> None:
    (tmp_path / "broken_tasks_28.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "broken_tasks_28", raising=False)
    assert main(["worker", "broken_tasks_28", "-q", "emails", "--backend", "memory://"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "cannot import 'broken_tasks_28'" in err and expected in err
    assert "Traceback" not in err


def test_a_missing_module_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "does.not.exist", "-q", "emails", "--backend", "memory://"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "cannot import 'does.not.exist'" in err and "no module named 'does'" in err


def test_a_file_path_gets_the_dotted_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "tasks.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert main(["worker", "app/tasks.py", "-q", "emails", "--backend", "memory://"]) == 2
    err = capsys.readouterr().err
    assert "app.tasks" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    "how", [["-A", "shop_app_29:relay"], ["shop_app_29:relay"], ["shop_app_29"]]
)
async def test_a_worker_works_the_app_its_module_names(tmp_path: Path, how: list[str]) -> None:
    """``-A MODULE:NAME``, ``MODULE:NAME`` or a module with one ``App``: the worker runs that
    app's tasks on its URL (no ``--backend``), and stores its limits and schedules."""
    q = queue_name("shop")
    url = f"sqlite:///{tmp_path}/app.db"
    (tmp_path / "shop_app_29.py").write_text(
        textwrap.dedent(f"""
        import relaymq

        relay = relaymq.App({url!r})
        relay.limit({q!r}, max_active=2)

        @relay.task("shop.total", queue={q!r})
        async def total(a: int, b: int) -> int:
            return a + b

        @relay.task("shop.sweep", queue={q!r}, every=3600)
        async def sweep() -> None: ...
        """)
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RELAYMQ_LOG_LEVEL": "INFO"}
    env.pop("RELAYMQ_BACKEND", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relaymq",
        "worker",
        *how,
        cwd=tmp_path,
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    backend = await connect(url)
    try:
        total: Task[[int, int], int] = Task(_total, "shop.total", Options(queue=q), False)
        queue = Queue(q, backend)
        handle = await queue.add(total.call(20, 22))
        assert await handle.result(timeout=30) == 42
        assert await queue.limits() is not None
        assert "shop.sweep" in [s.id for s in await Schedules(backend).list()]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        await backend.close()
    assert proc.returncode == 0, err.decode()


def test_an_app_that_is_not_one_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "not_app_29.py").write_text("relay = 42\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert main(["worker", "-A", "not_app_29:relay", "--backend", "memory://"]) == 2
    err = capsys.readouterr().err
    assert "not_app_29:relay is not a relaymq.App" in err
