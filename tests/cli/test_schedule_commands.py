"""``relaymq schedule``: add (checked before anything is stored), list, pause, resume, run-now
and remove, against real backends (SQLite and Redis), with their exit codes."""

from __future__ import annotations

from click.testing import CliRunner

from relaymq.backends.base import Backend
from relaymq.cli import main
from relaymq.cli.app import cli
from relaymq.job import JobState
from relaymq.schedules import store
from tests.cli.test_admin_commands import Capture, cli_json, on, one_error_line
from tests.support.jobs import queue_name


def test_add_list_pause_resume_run_now_remove(url: str, capsys: Capture) -> None:
    q = queue_name()
    b = ["--backend", url]
    add = [
        "schedule",
        "add",
        "nightly",
        "-t",
        "tests.tasks:add",
        "--cron",
        "0 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--args",
        "[1, 2]",
        "-q",
        q,
        *b,
    ]
    added = cli_json(add, capsys)
    assert (added["changed"], added["cron"], added["tz"], added["queue"], added["args"]) == (
        True,
        "0 2 * * *",
        "Europe/Berlin",
        q,
        [1, 2],
    )
    assert added["next_at"].endswith(("T01:00:00Z", "T00:00:00Z"))  # 02:00 Berlin, CET or CEST
    assert cli_json(add, capsys)["changed"] is False  # the same again: its state stands
    cli_json(
        [
            "schedule",
            "add",
            "fast",
            "-t",
            "tests.tasks:add",
            "--every",
            "15m",
            "--args",
            "[3, 4]",
            "--missed",
            "all",
            "-q",
            q,
            *b,
        ],
        capsys,
    )
    listed = cli_json(["schedule", "list", *b], capsys)
    assert [(s["id"], s["every"], s["missed"]) for s in listed] == [
        ("fast", 900.0, "all"),
        ("nightly", None, "skip"),
    ]

    assert cli_json(["schedule", "pause", "fast", *b], capsys) == {"id": "fast", "paused": True}
    assert main(["schedule", "list", *b]) == 0
    table = capsys.readouterr().out
    assert "paused" in table and "every 900s" in table and "cron 0 2 * * * Europe/Berlin" in table
    assert cli_json(["schedule", "resume", "fast", *b], capsys)["paused"] is False

    ran = cli_json(["schedule", "run-now", "nightly", *b], capsys)
    assert ran["queue"] == q and ran["job_id"].startswith("nightly@now-")

    async def enqueued(backend: Backend) -> list[tuple[str, str]]:
        return [(j.id, j.task) for j in await backend.list_jobs(q, JobState.WAITING)]

    assert on(url, enqueued) == [(ran["job_id"], "tests.tasks:add")]

    assert main(["schedule", "remove", "nightly", "-y", *b]) == 0
    assert "schedule 'nightly' removed" in capsys.readouterr().out
    assert [s["id"] for s in cli_json(["schedule", "list", *b], capsys)] == ["fast"]


def test_bad_schedules_are_refused_with_one_line_and_nothing_stored(
    url: str, capsys: Capture
) -> None:
    assert on(url, lambda backend: store.load(backend)) == []  # the store exists
    b = ["--backend", url]
    base = ["schedule", "add", "x", "-t", "tests.tasks:add", "--args", "[1, 2]"]
    for extra, code, message in (
        (["--cron", "99 * * * *"], 2, "invalid cron expression '99 * * * *'"),
        (["--cron", "0 * * * *", "--tz", "Nowhere/X"], 2, "unknown time zone 'Nowhere/X'"),
        (["--every", "5", "--args", "[1"], 2, "--args is not JSON"),
        (["--every", "5", "--args", "{}"], 2, "--args must be a JSON list"),
        (["--every", "5", "--args", "[1]"], 2, "missing a required argument: 'b'"),
        (["--every", "5", "--cron", "* * * * *"], 2, "needs exactly one of cron= and every="),
    ):
        assert main([*base, *extra, *b]) == code, extra
        assert message in one_error_line(capsys)
    assert main(["schedule", "add", "x", "-t", "tests.tasks:nope", "--every", "5", *b]) == 1
    assert "unknown task 'tests.tasks:nope'" in one_error_line(capsys)
    assert main(["schedule", "add", "x", "-t", "tests.tasks:add", "--every", "5", *b]) == 2
    assert "missing a required argument: 'a'" in one_error_line(capsys)
    assert cli_json(["schedule", "list", *b], capsys) == []  # nothing was stored


def test_commands_on_a_missing_schedule_exit_1(url: str, capsys: Capture) -> None:
    b = ["--backend", url]
    assert on(url, lambda backend: store.load(backend)) == []  # the store exists
    for action in ("pause", "resume", "run-now"):
        assert main(["schedule", action, "nope", *b]) == 1, action
        assert "no schedule 'nope'" in one_error_line(capsys)
    declined = CliRunner().invoke(cli, ["schedule", "remove", "nope", *b])
    assert declined.exit_code == 1 and "no schedule 'nope'" in declined.output
