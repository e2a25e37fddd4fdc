"""Every configuration error is one clear line and exit code 2; --version; env twins in help."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

import relaymq
from relaymq.cli import main
from relaymq.cli.app import cli
from relaymq.settings import Settings

Capture = pytest.CaptureFixture[str]


def one_line_error(capsys: Capture) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("Error: "), err
    return err


@pytest.mark.parametrize(
    ("argv", "env", "says"),
    [
        (["worker", "tests.tasks", "-c", "0"], {}, "concurrency"),
        (["worker", "tests.tasks"], {"RELAYMQ_STALLED_THRESHOLD": "x"}, "STALLED_THRESHOLD"),
        (["worker", "tests.tasks"], {"RELAYMQ_CONCURRENCY": "0"}, "concurrency"),
        (["--log-level", "bogus", "stats"], {}, "bogus"),
        (["stats", "--backend", "redis://h:notaport/0"], {}, "port"),
        (["stats", "--backend", "sqlite:///x.db?busy_timeout=x"], {}, "busy_timeout"),
        (["worker", "tests.tasks", "-q", "bad name", "--backend", "memory://"], {}, "bad name"),
        (["stats", "--backend", "mysql://x"], {}, "unknown backend URL"),
    ],
)
def test_config_errors_are_one_line_and_exit_2(
    argv: list[str],
    env: dict[str, str],
    says: str,
    capsys: Capture,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(argv) == 2
    assert says in one_line_error(capsys)


def test_version(capsys: Capture) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == "relaymq, version 0.1.0"
    assert relaymq.__name__ == "relaymq"


def test_every_option_of_every_command_has_an_env_twin_in_help(capsys: Capture) -> None:
    commands = {"": cli, **{name: command for name, command in cli.commands.items()}}  # type: ignore[attr-defined]
    for name, command in commands.items():
        argv = [name, "--help"] if name else ["--help"]
        assert main(argv) == 0
        out = re.sub(r"\s+", " ", capsys.readouterr().out)
        for param in command.params:
            if param.name in ("help", "version") or param.param_type_name != "option":
                continue
            assert param.envvar, f"{name or 'relaymq'} {param.opts[0]} has no RELAYMQ_* twin"
            assert f"env var: {param.envvar}" in out, f"{param.envvar} not shown in {argv}"


def test_worker_help_lists_every_setting_variable(capsys: Capture) -> None:
    assert main(["worker", "--help"]) == 0
    out = re.sub(r"\s+", " ", capsys.readouterr().out)
    for f in fields(Settings):
        assert f"RELAYMQ_{f.name.upper()}" in out
