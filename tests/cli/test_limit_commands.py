"""``relaymq queue limits``: set, show, list and clear a queue's limits against real backends
(SQLite and Redis), and refuse bad ones with a usage error before anything is stored."""

from __future__ import annotations

from relaymq.backends.base import Backend
from relaymq.cli import main
from relaymq.records.limits import Limits
from tests.cli.test_admin_commands import Capture, cli_json, on, one_error_line
from tests.support.jobs import queue_name


def test_set_show_list_and_clear(url: str, capsys: Capture) -> None:
    q, other = queue_name(), queue_name()
    b = ["--backend", url]
    set_all = [
        "queue",
        "limits",
        q,
        "--max-active",
        "4",
        "--rate",
        "100/m",
        "--key-rate",
        "5/s",
        "--key-max-active",
        "2",
        *b,
    ]
    assert cli_json(set_all, capsys) == {
        "queue": q,
        "limits": {
            "max_active": 4,
            "rate": 100,
            "per": 60.0,
            "key_rate": 5,
            "key_per": 1.0,
            "key_max_active": 2,
            "fair": False,
            "weights": {},
        },
    }
    cli_json(["queue", "limits", other, "--rate", "5/s", *b], capsys)

    async def stored(backend: Backend) -> dict[str, Limits]:
        return await backend.list_limits()

    assert on(url, stored) == {q: Limits(4, 100, 60.0, 5, 1.0, 2), other: Limits(rate=5, per=1.0)}
    assert main(["queue", "limits", q, *b]) == 0
    assert (
        "at most 4 active, 100 per 60s, 5 per 1s per key, at most 2 active per key"
        in capsys.readouterr().out
    )
    listed = cli_json(["queue", "limits", *b], capsys)
    assert [x["queue"] for x in listed] == sorted([q, other])
    # Setting replaces: --rate alone unsets max_active.
    cli_json(["queue", "limits", q, "--rate", "10/2", *b], capsys)
    assert on(url, stored)[q] == Limits(rate=10, per=2.0)
    fair = ["queue", "limits", q, "--fair", "--weight", "big=3", "--key-max-active", "1", *b]
    assert cli_json(fair, capsys)["limits"]["weights"] == {"big": 3}
    assert on(url, stored)[q] == Limits(key_max_active=1, fair=True, weights=(("big", 3),))
    assert cli_json(["queue", "limits", q, "--clear", *b], capsys)["limits"] is None
    assert q not in on(url, stored)


def test_bad_limits_are_usage_errors_and_store_nothing(url: str, capsys: Capture) -> None:
    q = queue_name()
    b = ["--backend", url]
    cli_json(["queue", "limits", q, "--max-active", "2", *b], capsys)
    for argv, message in [
        (["--rate", "lots"], "expected N/PERIOD"),
        (["--rate", "5/0"], "per must be a number of seconds > 0"),
        (["--max-active", "0"], "0 is not in the range 1<=x<="),
        (["--key-max-active", "0"], "0 is not in the range 1<=x<="),
        (["--weight", "a=2"], "with fair=True"),
        (["--fair", "--weight", "a"], "expected KEY=N"),
        (["--fair", "--weight", "a=0"], "weight of 'a' must be >= 1"),
        (["--clear", "--max-active", "3"], "--clear removes the limits: give it alone"),
    ]:
        assert main(["queue", "limits", q, *argv, *b]) == 2
        assert message in one_error_line(capsys)
    assert main(["queue", "limits", "--rate", "5/s", *b]) == 2
    assert "name the QUEUE" in one_error_line(capsys)

    async def stored(backend: Backend) -> Limits | None:
        return (await backend.list_limits()).get(q)

    assert on(url, stored) == Limits(max_active=2)
