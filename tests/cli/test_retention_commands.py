"""``relaymq queue retention`` and ``queue info``: set and show a queue's retention against
real backends (SQLite and Redis), and refuse bad windows before anything is stored."""

from __future__ import annotations

from relaymq import retention
from relaymq.backends.base import Backend
from relaymq.cli import main
from relaymq.instrumented import Instrumented
from relaymq.records.retention import Retention
from tests.cli.test_admin_commands import Capture, cli_json, on, one_error_line
from tests.support.jobs import new_job, queue_name

DEFAULTS = {"completed": 86400.0, "cancelled": 86400.0, "failed": 604800.0, "max_finished": None}


async def _stored(backend: Backend, q: str) -> Retention | None:
    return await retention.stored(Instrumented(backend), q)


def test_show_set_and_see_it_in_queue_info(url: str, capsys: Capture) -> None:
    q = queue_name()
    b = ["--backend", url]
    on(url, lambda backend: backend.enqueue([new_job(q)]))
    assert cli_json(["queue", "retention", q, *b], capsys) == {"queue": q, "retention": DEFAULTS}
    assert main(["queue", "retention", q, *b]) == 0
    assert "completed 1d, cancelled 1d, failed 1w" in capsys.readouterr().out
    argv = ["queue", "retention", q, "--completed", "30m", "--failed", "0", "--max-finished", "50"]
    assert cli_json([*argv, *b], capsys)["retention"] == {
        "completed": 1800.0,
        "cancelled": 86400.0,
        "failed": 0.0,
        "max_finished": 50,
    }
    assert on(url, lambda backend: _stored(backend, q)) == Retention(1800, 86400, 0, 50)
    info = cli_json(["queue", "info", q, *b], capsys)
    assert info["retention"]["completed"] == 1800.0
    assert main(["queue", "info", q, *b]) == 0
    shown = capsys.readouterr().out
    assert "retention: completed 30m, cancelled 1d, failed forever, at most 50 per state" in shown


def test_bad_windows_are_usage_errors_and_store_nothing(url: str, capsys: Capture) -> None:
    q = queue_name()
    b = ["--backend", url]
    for argv, message in [
        (["--completed", "-1h"], "is not a duration"),
        (["--failed", "soon"], "is not a duration"),
        (["--cancelled", "101000d"], "longer than 100 years"),
        (["--max-finished", "0"], "0 is not in the range 1<=x<="),
    ]:
        assert main(["queue", "retention", q, *argv, *b]) == 2
        assert message in one_error_line(capsys)
    assert on(url, lambda backend: _stored(backend, q)) is None
