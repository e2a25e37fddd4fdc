from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import orjson
import pytest

from relaymq import Queue
from relaymq.backends import BACKENDS, from_url
from relaymq.backends.memory import InMemoryBackend
from relaymq.cli import main
from tests import tasks


def test_help_lists_commands_and_env_twins(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("worker", "demo", "stats"):
        assert command in out
    assert main(["worker", "--help"]) == 0
    out = capsys.readouterr().out
    assert "RELAYMQ_BACKEND" in out and "RELAYMQ_CONCURRENCY" in out


def test_unknown_backend_scheme_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", "--backend", "mysql://x"]) == 2  # a configuration error
    err = capsys.readouterr().err
    assert "unknown backend URL" in err and "sqlite://" in err


def test_worker_with_unimportable_module(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "no_such_module_xyz", "--backend", "memory://"]) == 2
    assert "cannot import" in capsys.readouterr().err


def test_stats_json_on_memory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", "--backend", "memory://", "--json"]) == 0
    assert capsys.readouterr().out.strip() == "{}"


def test_migrate_on_a_backend_without_migrations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", "--backend", "memory://"]) == 0
    assert "nothing to migrate" in capsys.readouterr().out


class MigratingBackend(InMemoryBackend):
    """A backend that declares versioned migrations: the CLI must learn it from capabilities."""

    capabilities = replace(InMemoryBackend.capabilities, migrations=True)
    applied: ClassVar[list[str]] = []

    async def migrate(self) -> list[str]:
        new = [name for name in ("0001_first", "0002_second") if name not in self.applied]
        self.applied.extend(new)
        return new


def test_migrate_asks_the_backend_not_the_url(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A scheme the CLI has never heard of: ``migrate`` runs because the backend says it can."""
    monkeypatch.setitem(BACKENDS, "migrating", (__name__, "MigratingBackend", None))
    monkeypatch.setattr(MigratingBackend, "applied", [])
    assert main(["migrate", "--backend", "migrating://"]) == 0
    assert capsys.readouterr().out.split() == ["applied", "0001_first", "applied", "0002_second"]
    assert main(["migrate", "--backend", "migrating://"]) == 0
    assert "schema is up to date" in capsys.readouterr().out


def test_stats_counts_each_queue_by_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'stats.db'}"

    async def fill() -> None:
        async with from_url(url) as backend:
            await Queue("emails", backend).add_bulk([tasks.add.call(1, 2)] * 3)
            await Queue("reports", backend).add(tasks.add.with_options(delay=60).call(1, 2))

    asyncio.run(fill())
    assert main(["stats", "--backend", url, "--json"]) == 0
    counts = orjson.loads(capsys.readouterr().out)
    assert set(counts) == {"emails", "reports"}
    assert counts["emails"]["waiting"] == 3 and counts["reports"]["delayed"] == 1
    assert sum(counts["emails"].values()) == 3 and sum(counts["reports"].values()) == 1
