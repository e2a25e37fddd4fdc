"""When a schedule's ticks fall (time zones, DST, intervals), what a pass fires after ticks were
missed, and the definition-time checks that keep a bad schedule from being stored."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from relaymq import task
from relaymq.errors import ConfigError, CorruptRecordError, SerializationError, TaskNotFoundError
from relaymq.schedules import Schedule, define
from relaymq.schedules.spec import stamp


@task(name="tests.unit.schedule:report")
def report(region: str, limit: int = 10) -> None: ...


def ms(text: str) -> int:
    """``2026-03-08T13:00:00`` (UTC) in milliseconds."""
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def ticks(schedule: Schedule, after: str, n: int) -> list[str]:
    out, t = [], ms(after)
    for _ in range(n):
        t = schedule.next_after(t)
        out.append(stamp(t))
    return out


def cron(expr: str, tz: str = "UTC") -> Schedule:
    return Schedule(id="s", task="t", queue="q", cron=expr, tz=tz)


def test_a_cron_keeps_its_wall_time_across_a_dst_change() -> None:
    # New York moves to summer time on 2026-03-08: 09:00 local is 14:00 UTC, then 13:00 UTC.
    assert ticks(cron("0 9 * * *", "America/New_York"), "2026-03-06T15:00:00", 4) == [
        "2026-03-07T14:00:00Z",
        "2026-03-08T13:00:00Z",
        "2026-03-09T13:00:00Z",
        "2026-03-10T13:00:00Z",
    ]


def test_a_tick_in_the_skipped_hour_runs_once_shifted_by_the_gap() -> None:
    # Berlin skips 02:00-03:00 on 2026-03-29. 02:30 local runs at 03:30 CEST (01:30 UTC).
    assert ticks(cron("30 2 * * *", "Europe/Berlin"), "2026-03-27T12:00:00", 3) == [
        "2026-03-28T01:30:00Z",
        "2026-03-29T01:30:00Z",
        "2026-03-30T00:30:00Z",
    ]
    # Every half hour: 02:00 and 02:30 fall into the gap and meet 03:00 and 03:30; each
    # moment fires once, and time never runs backwards.
    assert ticks(cron("*/30 * * * *", "Europe/Berlin"), "2026-03-29T00:00:00", 4) == [
        "2026-03-29T00:30:00Z",
        "2026-03-29T01:00:00Z",
        "2026-03-29T01:30:00Z",
        "2026-03-29T02:00:00Z",
    ]


def test_a_tick_in_the_repeated_hour_runs_once() -> None:
    # Berlin repeats 02:00-03:00 on 2026-10-25 (CEST, then CET): 02:30 runs in the first pass.
    assert ticks(cron("30 2 * * *", "Europe/Berlin"), "2026-10-24T12:00:00", 2) == [
        "2026-10-25T00:30:00Z",
        "2026-10-26T01:30:00Z",
    ]


def test_an_interval_ticks_from_its_anchor() -> None:
    every = Schedule(id="s", task="t", queue="q", every=90)
    assert ticks(every, "2026-01-01T00:00:00", 2) == [
        "2026-01-01T00:01:30Z",
        "2026-01-01T00:03:00Z",
    ]
    shifted = Schedule(id="s", task="t", queue="q", every=0.25, anchor=0.1)
    assert shifted.next_after(1000) == 1100 and shifted.next_after(1100) == 1350
    assert stamp(1350) == "1970-01-01T00:00:01.350Z"


def test_equal_schedules_store_the_same_bytes() -> None:
    a = Schedule(id="s", task="t", queue="q", every=60, args=(1,), kwargs={"b": 2, "a": 1})
    b = Schedule(id="s", task="t", queue="q", every=60.0, args=(1,), kwargs={"a": 1, "b": 2})
    assert a.encode() == b.encode()
    assert Schedule.decode("s", a.encode()) == a


def test_an_unreadable_stored_schedule_is_a_corrupt_record() -> None:
    for spec in (b"", b"{", b'{"task":"t"}', b'{"task":"t","queue":"q","cron":"nope","args":[]}'):
        with pytest.raises(CorruptRecordError, match="schedule 's' cannot be read"):
            Schedule.decode("s", spec)


def test_a_plan_fires_on_time_ticks_and_what_the_policy_keeps_of_missed_ones() -> None:
    start = ms("2026-01-01T00:00:00")
    now = start + 10 * 60_000 + 30_000  # 00:10:30, grace 60 s: 00:10 is on time
    minute = {m: start + m * 60_000 for m in range(12)}
    for missed, fire, dropped in (
        ("skip", [10], 10),
        ("once", [9, 10], 9),
        ("all", [7, 8, 9, 10], 7),
    ):
        s = Schedule(id="s", task="t", queue="q", every=60, missed=missed, max_missed=3)
        plan = s.plan(minute[0], now)
        assert plan.fire == [minute[m] for m in fire], missed
        assert (plan.next_ms, plan.dropped) == (minute[11], dropped)
    assert s.plan(minute[11], now).fire == []  # nothing due


def test_a_far_behind_schedule_walks_a_bounded_number_of_ticks() -> None:
    s = Schedule(id="s", task="t", queue="q", every=0.001, missed="all", grace=0.01)
    plan = s.plan(0, 10**9)  # eleven days of millisecond ticks
    assert plan.fire == list(range(10**9 - 10, 10**9 + 1))
    assert plan.next_ms == 10**9 + 1


# -- definition-time checks: a clear error, nothing stored ----------------------------------


@pytest.mark.parametrize(
    ("how", "error", "message"),
    [
        ({"cron": "61 * * * *"}, ConfigError, "invalid cron expression '61 \\* \\* \\* \\*'"),
        (
            {"cron": "0 9 * * *", "tz": "Mars/Olympus"},
            ConfigError,
            "unknown time zone 'Mars/Olympus'",
        ),
        ({}, ConfigError, "needs exactly one of cron= and every="),
        ({"cron": "* * * * *", "every": 5}, ConfigError, "needs exactly one"),
        ({"every": 0}, ConfigError, "every must be at least 0.001 seconds"),
        ({"every": 5, "missed": "later"}, ConfigError, "missed must be one of skip, once, all"),
        ({"every": 5, "id": "has space"}, ConfigError, "invalid schedule id"),
    ],
)
def test_bad_definitions_are_refused(how: dict[str, object], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        define(report, args=("eu",), **how)  # type: ignore[arg-type]


def test_arguments_are_checked_against_the_task() -> None:
    with pytest.raises(ConfigError, match="the arguments do not fit it: missing a required"):
        define(report, every=60)
    with pytest.raises(ConfigError, match="unexpected keyword argument 'colour'"):
        define(report, every=60, args=("eu",), kwargs={"colour": "red"})
    with pytest.raises(SerializationError, match="cannot serialize"):
        define(report, every=60, args=({"eu"},))
    s = define(report, every=60, args=("eu",), kwargs={"limit": 3}, id="daily-eu")
    assert (s.id, s.task, s.queue, s.args, s.kwargs) == (
        "daily-eu",
        "tests.unit.schedule:report",
        "default",
        ("eu",),
        {"limit": 3},
    )


def test_an_unknown_task_is_refused() -> None:
    with pytest.raises(TaskNotFoundError, match="no_such_module"):
        define("no_such_module:job", every=60)
