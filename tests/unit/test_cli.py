from __future__ import annotations

import pytest

from relaymq.cli import main


def test_help_lists_commands_and_env_twins(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("worker", "demo", "stats"):
        assert command in out
    assert main(["worker", "--help"]) == 0
    out = capsys.readouterr().out
    assert "RELAYMQ_BACKEND" in out and "RELAYMQ_CONCURRENCY" in out


def test_unknown_backend_scheme_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", "--backend", "mysql://x"]) == 1
    err = capsys.readouterr().err
    assert "unknown backend URL" in err and "sqlite://" in err


def test_worker_with_unimportable_module(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "no_such_module_xyz", "--backend", "memory://"]) == 1
    assert "cannot import" in capsys.readouterr().err


def test_stats_json_on_memory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", "--backend", "memory://", "--json"]) == 0
    assert capsys.readouterr().out.strip() == "{}"


def test_migrate_on_a_backend_without_migrations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", "--backend", "memory://"]) == 0
    assert "nothing to migrate" in capsys.readouterr().out
