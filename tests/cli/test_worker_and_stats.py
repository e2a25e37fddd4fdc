"""Queue discovery from the task registry, paused queues in stats, the log formats."""

from __future__ import annotations

import asyncio
import logging
import textwrap
from pathlib import Path

import orjson
import pytest

from relaymq import Queue, connect
from relaymq.cli import main
from relaymq.cli.app import discover_queues
from relaymq.cli.logs import JSONFormatter, PlainFormatter
from tests import tasks


def test_discovery_finds_named_and_re_exported_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "shop_tasks_17.py").write_text(
        textwrap.dedent("""
        from relaymq import task
        from tests.tasks import add  # re-exported: its queue is "tests"

        @task("billing.charge", queue="billing")  # an explicit name, not "module:function"
        async def charge(amount: int) -> None: ...

        @task(queue="mail")
        async def send(to: str) -> None: ...
    """)
    )
    monkeypatch.chdir(tmp_path)
    assert discover_queues("shop_tasks_17") == ["billing", "mail", tasks.add.options.queue]


def test_a_module_without_tasks_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty_tasks_17.py").write_text("X = 1\n")
    monkeypatch.chdir(tmp_path)
    assert main(["worker", "empty_tasks_17", "--backend", "memory://"]) == 2
    assert "defines no @task" in capsys.readouterr().err


def test_stats_shows_paused_queues(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path}/stats.db"

    async def prepare() -> None:
        backend = await connect(url)
        try:
            await Queue("held", backend).add(tasks.add.call(1, 2))
            await Queue("held", backend).pause()
            await Queue("open", backend).add(tasks.add.call(1, 2))
        finally:
            await backend.close()

    asyncio.run(prepare())
    assert main(["stats", "--backend", url, "--json"]) == 0
    found = orjson.loads(capsys.readouterr().out)
    assert (found["held"]["paused"], found["open"]["paused"]) == (True, False)
    assert found["held"]["waiting"] == 1
    assert main(["stats", "--backend", url]) == 0
    assert "PAUSED" in capsys.readouterr().out


def record_with_job_fields() -> logging.LogRecord:
    record = logging.LogRecord(
        "relaymq.worker",
        logging.WARNING,
        __file__,
        1,
        "job %s failed: %s",
        ("j1", "boom " * 40),
        None,
    )
    record.queue, record.job_id, record.task, record.attempt = "q", "j1", "m:f", 2
    return record


def test_plain_format_is_one_unwrapped_line_with_the_job_fields() -> None:
    line = PlainFormatter().format(record_with_job_fields())
    assert "\n" not in line and len(line) > 200
    assert line.endswith("[queue=q job_id=j1 task=m:f attempt=2]")
    assert " WARNING relaymq.worker: job j1 failed: boom" in line


def test_json_format_is_one_object_per_line() -> None:
    entry = orjson.loads(JSONFormatter().format(record_with_job_fields()))
    assert entry["level"] == "WARNING" and entry["logger"] == "relaymq.worker"
    assert (entry["queue"], entry["job_id"], entry["task"], entry["attempt"]) == (
        "q",
        "j1",
        "m:f",
        2,
    )
    assert entry["message"].startswith("job j1 failed: boom")


@pytest.mark.parametrize(("fmt", "kind"), [("json", JSONFormatter), ("plain", PlainFormatter)])
def test_the_cli_installs_the_chosen_format(fmt: str, kind: type) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        assert main(["--log-format", fmt, "stats", "--backend", "memory://", "--json"]) == 0
        assert [type(h.formatter) for h in root.handlers] == [kind]
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])


def test_stats_on_a_mistyped_sqlite_path_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "typo.db"
    assert main(["stats", "--backend", f"sqlite:///{missing}"]) == 2
    assert f"no SQLite database at {missing}" in capsys.readouterr().err
    assert not missing.exists()
