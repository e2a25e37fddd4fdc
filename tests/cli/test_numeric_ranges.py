"""Numbers out of range on the command line are one line and exit 2 (a usage error), never a
traceback from deep in a backend."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from relaymq import Queue, connect
from relaymq.cli import main
from tests import tasks

HUGE = "99999999999999999999"


def prepared(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/ranges.db"

    async def prepare() -> None:
        backend = await connect(url)
        try:
            await Queue("emails", backend).add(tasks.add.call(1, 2))
        finally:
            await backend.close()

    asyncio.run(prepare())
    return url


@pytest.mark.parametrize(
    "argv",
    [
        ["job", "list", "emails", "--offset", HUGE],
        ["job", "list", "emails", "--state", "completed", "--older-than", HUGE + "w"],
        ["dlq", "list", "emails", "--offset", HUGE],
        ["queue", "limits", "emails", "--max-active", HUGE],
        ["queue", "limits", "emails", "--rate", HUGE + "/s"],
        ["queue", "limits", "emails", "--key-rate", "10/" + HUGE],
        ["queue", "clean", "emails", "--yes", "--older-than", HUGE + "d"],
        ["stats", "--watch", "--count", "1", "--interval", "1e300"],
        ["worker", "tests.tasks", "-q", "emails", "-c", HUGE],
        ["schedule", "add", "x", "-t", "tests.tasks:add", "--args", "[1,2]", "--every", HUGE],
        [
            "schedule",
            "add",
            "x",
            "-t",
            "tests.tasks:add",
            "--args",
            "[1,2]",
            "--every",
            "1",
            "--missed",
            "all",
            "--max-missed",
            HUGE,
        ],
    ],
    ids=lambda argv: " ".join([*argv[:2], argv[-2]]),
)
def test_a_huge_number_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    url = prepared(tmp_path)
    assert main([*argv, "--backend", url]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
