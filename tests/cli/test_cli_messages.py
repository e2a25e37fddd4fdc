"""What the CLI prints beside its answer: a durability warning once, as a log line saying
what to set; ``migrate`` creating a new SQLite database; ``stats --watch`` into a pipe; one
line for a RabbitMQ that is down."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from relaymq.cli import main
from tests.redis.server import PrivateRedis

ROOT = Path(__file__).resolve().parents[2]


def relaymq_cli(*argv: str, timeout: float = 60) -> tuple[int, str, str]:
    """Run ``relaymq ARGV`` in a process of its own, as a shell does (stdout a pipe)."""

    async def go() -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "relaymq",
            *argv,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    return asyncio.run(go())


def test_a_redis_that_keeps_nothing_on_disk_is_one_log_line_saying_what_to_set(
    tmp_path: Path,
) -> None:
    server = PrivateRedis(tmp_path / "r", "--appendonly", "no")
    server.start()
    try:
        code, _, err = relaymq_cli("queue", "list", "--backend", server.url)
    finally:
        server.kill()
    assert code == 0, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert " WARNING relaymq: Redis appendonly is off" in lines[0]
    assert "set appendonly yes" in lines[0] and "DurabilityWarning" not in lines[0]


def test_migrate_creates_a_new_sqlite_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/new.db"
    assert main(["migrate", "--backend", url]) == 0
    assert "created" in capsys.readouterr().out
    assert (tmp_path / "new.db").exists()
    assert main(["queue", "list", "--backend", url]) == 0
    assert main(["migrate", "--backend", url]) == 0
    assert "up to date" in capsys.readouterr().out


def test_stats_watch_into_a_pipe_prints_a_line_per_interval(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/w.db"
    assert main(["migrate", "--backend", url]) == 0
    code, out, err = relaymq_cli(
        "stats", "--watch", "--interval", "0.1", "--count", "3", "--backend", url
    )
    assert code == 0, err
    assert len([line for line in out.splitlines() if line.strip()]) >= 3, out


def test_a_rabbitmq_that_is_down_is_only_relaymqs_own_line() -> None:
    code, _, err = relaymq_cli(
        "queue", "list", "--backend", "amqp://guest:guest@127.0.0.1:1/?store=memory://"
    )
    assert code == 3
    assert err.strip().splitlines() == [err.strip()], err
    assert err.startswith("Error: cannot reach RabbitMQ") and "aiormq" not in err
