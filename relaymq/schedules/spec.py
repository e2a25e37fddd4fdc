"""One schedule: which job to enqueue, and when its ticks fall.

A tick is a moment in milliseconds since the epoch. A cron schedule's ticks are wall-clock
times in its time zone: croniter reads the expression over local time without a zone, and
each local time is then placed in the zone. So a DST change never moves a tick off its wall
time, a tick in the hour the clocks skip runs when that hour is skipped to (02:30 on a spring
day runs at 03:00 local; a tick at a wall time that follows the gap is then the same moment,
fired once), and a tick in the hour that repeats runs once, in its first pass. An interval
schedule ticks every ``every`` seconds from ``anchor`` (the epoch by default, so
``every=60`` ticks on each minute).
"""

from __future__ import annotations

import dataclasses
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson
from croniter import croniter  # type: ignore[import-untyped]

from relaymq.errors import ConfigError, CorruptRecordError, SerializationError
from relaymq.job import MAX_PRIORITY, NewJob
from relaymq.options import check_text, validate_queue_name
from relaymq.records.store import StoredSchedule
from relaymq.serializers import DEFAULT_SERIALIZER

MISSED_POLICIES = ("skip", "once", "all")
"""What happens to ticks missed while no scheduler ran (``Schedule.missed``)."""
SCHEDULE_ID = re.compile(r"[A-Za-z0-9_.:@/-]{1,200}")
"""A whole schedule id (applied with ``fullmatch``: ``$`` would also pass a final newline)."""
MAX_FIRE = 1000
"""Most ticks one schedule fires in one pass (the latest ones)."""
WALK_LIMIT = 100_000
"""Most ticks a pass walks through to find a schedule's due ones; past that, the older ones
count as skipped."""


@dataclass(frozen=True, slots=True)
class Schedule:
    """A task enqueued by itself, on a cron expression or every ``every`` seconds.

    Every tick fires exactly once, as a job whose id is ``<schedule id>@<tick, UTC ISO>``, so
    two schedulers firing the same tick make one job and a duplicate. A tick fires on time
    when a scheduler sees it within ``grace`` seconds; ticks older than that were missed
    (no scheduler ran) and ``missed`` says what becomes of them: ``skip`` fires none, ``once``
    fires the latest of them once, ``all`` fires each of the latest ``max_missed``.
    """

    id: str
    task: str
    queue: str
    cron: str | None = None
    every: float | None = None
    tz: str = "UTC"
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    missed: str = "skip"
    max_missed: int = 10
    grace: float = 60.0
    anchor: float = 0.0
    priority: int = 0
    retries: int = 0
    ttl: float | None = None
    timeout: float | None = None

    def __post_init__(self) -> None:
        # One stored form for equal schedules: ``every=60`` and ``every=60.0`` encode alike.
        for name in ("every", "grace", "anchor"):
            value = getattr(self, name)
            if isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, name, float(value))
        self.validate()

    def validate(self) -> None:
        """Raise ``ConfigError`` (or ``SerializationError`` for arguments JSON cannot carry)
        naming the first thing wrong; a schedule that passes can be stored and fired."""
        check_schedule_id(self.id)
        check_text(self.task, "task name", max_length=None)
        validate_queue_name(self.queue)
        if (self.cron is None) == (self.every is None):
            raise ConfigError(f"schedule {self.id!r} needs exactly one of cron= and every=")
        if self.cron is not None and not croniter.is_valid(self.cron):
            raise ConfigError(f"schedule {self.id!r}: invalid cron expression {self.cron!r}")
        if self.every is not None and not self.every >= 0.001:
            raise ConfigError(
                f"schedule {self.id!r}: every must be at least 0.001 seconds, got {self.every!r}"
            )
        _zone(self.tz, self.id)
        if self.missed not in MISSED_POLICIES:
            raise ConfigError(
                f"schedule {self.id!r}: missed must be one of "
                f"{', '.join(MISSED_POLICIES)}, got {self.missed!r}"
            )
        if self.max_missed < 1 or self.grace < 0 or self.retries < 0:
            raise ConfigError(
                f"schedule {self.id!r}: max_missed must be >= 1, grace and retries >= 0"
            )
        if not 0 <= self.priority <= MAX_PRIORITY:
            raise ConfigError(f"schedule {self.id!r}: priority must be 0 to {MAX_PRIORITY}")
        if (self.ttl is not None and self.ttl <= 0) or (
            self.timeout is not None and self.timeout <= 0
        ):
            raise ConfigError(f"schedule {self.id!r}: ttl and timeout must be > 0")
        self.payload()  # the arguments must serialize

    # -- stored form ------------------------------------------------------------------------

    def encode(self) -> bytes:
        """The stored ``spec``: the same bytes for the same schedule, so saving an unchanged
        schedule again changes nothing (``relaymq.schedules.store.save``)."""
        record = dataclasses.asdict(self)
        del record["id"]
        record["args"] = list(self.args)
        record["kwargs"] = dict(self.kwargs)
        return orjson.dumps(record, option=orjson.OPT_SORT_KEYS)

    def stored(self, now_ms: int) -> StoredSchedule:
        """This schedule as ``relaymq.schedules.store.save`` takes it: due at its first tick after
        ``now_ms`` (when it is new or changed; an unchanged one keeps its stored state)."""
        return StoredSchedule(self.id, self.encode(), self.next_after(now_ms))

    @classmethod
    def decode(cls, schedule_id: str, spec: bytes) -> Schedule:
        """The schedule stored as ``spec``; ``CorruptRecordError`` when it cannot be read."""
        try:
            record = orjson.loads(spec)
            record["args"] = tuple(record["args"])
            return cls(id=schedule_id, **record)
        except (orjson.JSONDecodeError, TypeError, KeyError, ConfigError, SerializationError) as e:
            raise CorruptRecordError(f"schedule {schedule_id!r} cannot be read: {e}") from e

    # -- timing -----------------------------------------------------------------------------

    def next_after(self, t_ms: int) -> int:
        """The first tick strictly after ``t_ms``."""
        if self.every is not None:
            step, anchor = round(self.every * 1000), round(self.anchor * 1000)
            return anchor + ((t_ms - anchor) // step + 1) * step
        assert self.cron is not None
        zone = _zone(self.tz, self.id)
        local = datetime.fromtimestamp(t_ms / 1000, zone).replace(tzinfo=None)
        ticks = croniter(self.cron, local)
        while True:  # local times only increase, so this ends at the first one after t_ms
            candidate: datetime = ticks.get_next(datetime)
            tick = round(candidate.replace(tzinfo=zone).timestamp() * 1000)
            if tick > t_ms:
                return tick

    def plan(self, next_ms: int, now_ms: int) -> Plan:
        """What to fire at ``now_ms`` for a schedule whose next tick is ``next_ms``."""
        grace_ms = round(self.grace * 1000)
        on_time: deque[int] = deque(maxlen=MAX_FIRE)
        missed: deque[int] = deque(maxlen=self.max_missed if self.missed == "all" else 1)
        tick, walked = next_ms, 0
        while tick <= now_ms:
            (on_time if now_ms - tick <= grace_ms else missed).append(tick)
            walked += 1
            if walked == WALK_LIMIT:  # far behind: what lies before the grace counts as skipped
                missed.clear()
                tick = self.next_after(max(tick, now_ms - grace_ms - 1))
            else:
                tick = self.next_after(tick)
        fire = ([] if self.missed == "skip" else list(missed)) + list(on_time)
        return Plan(fire[-MAX_FIRE:], tick, walked - len(fire[-MAX_FIRE:]))

    # -- the job ----------------------------------------------------------------------------

    def payload(self) -> bytes:
        return DEFAULT_SERIALIZER.dumps({"args": list(self.args), "kwargs": dict(self.kwargs)})

    def job_id(self, tick_ms: int) -> str:
        """The id of the job a tick fires: the same for the same tick in every process."""
        return f"{self.id}@{stamp(tick_ms)}"

    def new_job(self, job_id: str, payload: bytes | None = None) -> NewJob:
        return NewJob(
            self.queue,
            job_id,
            self.task,
            payload or self.payload(),
            self.priority,
            0.0,
            self.ttl,
            self.retries + 1,
            self.timeout,
        )

    def describe(self) -> str:
        """When it runs, in words: ``cron 0 9 * * 1-5 Europe/Berlin`` or ``every 30s``."""
        return f"cron {self.cron} {self.tz}" if self.cron is not None else f"every {self.every:g}s"


@dataclass(frozen=True, slots=True)
class Plan:
    """One pass over one schedule: the ticks to fire, oldest first; its next tick after the
    pass; and how many due ticks it lets go (missed ones the policy skips, at least)."""

    fire: list[int]
    next_ms: int
    dropped: int


def stamp(tick_ms: int) -> str:
    """A tick as UTC ISO 8601, with milliseconds only when it has some."""
    moment = datetime.fromtimestamp(tick_ms / 1000, UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{tick_ms % 1000:03d}Z" if tick_ms % 1000 else f"{text}Z"


def check_schedule_id(schedule_id: str) -> str:
    """``schedule_id`` when it is a valid schedule id; else ``ConfigError`` saying why."""
    if not isinstance(schedule_id, str):
        raise ConfigError(f"schedule id must be a str, got {type(schedule_id).__name__}")
    if not SCHEDULE_ID.fullmatch(schedule_id):
        raise ConfigError(
            f"invalid schedule id {schedule_id!r}: use 1-200 letters, digits and _ . : @ / -"
        )
    return schedule_id


def _zone(name: str, schedule_id: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ConfigError(f"schedule {schedule_id!r}: unknown time zone {name!r}") from e
