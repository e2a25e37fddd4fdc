"""Stored schedules, on the meta store: one record ``schedule:<id>`` per schedule, written once
here for every backend. Each change is a read and a compare-and-set (``meta_swap``), tried
again when another process wrote in between, so every change is atomic between processes.

The record is a JSON header (``next_ms``, ``paused``), a newline, then the opaque ``spec``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import orjson

from relaymq.backends.meta import MetaStore
from relaymq.errors import ConfigError, CorruptRecordError
from relaymq.records.meta import MetaRecord
from relaymq.records.store import StoredSchedule

PREFIX = "schedule:"


def _key(schedule_id: str) -> str:
    if not isinstance(schedule_id, str):  # never a document a store could read as a query
        raise ConfigError(f"schedule id must be a str, got {type(schedule_id).__name__}")
    return PREFIX + schedule_id


def encode(schedule: StoredSchedule) -> bytes:
    head = orjson.dumps({"next_ms": schedule.next_ms, "paused": schedule.paused})
    return head + b"\n" + schedule.spec


def decode(record: MetaRecord) -> StoredSchedule:
    """The schedule a record holds; ``CorruptRecordError`` when its header cannot be read."""
    schedule_id = record.key.removeprefix(PREFIX)
    head, _, spec = record.value.partition(b"\n")
    try:
        state = orjson.loads(head)
        return StoredSchedule(schedule_id, spec, int(state["next_ms"]), bool(state["paused"]))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise CorruptRecordError(f"schedule {schedule_id!r} cannot be read: {e}") from e


async def save(store: MetaStore, schedule: StoredSchedule) -> bool:
    """Create or update a schedule. When one with the same id and the same ``spec`` is
    stored, it is kept as it is (its ``next_ms`` and ``paused`` win); a changed ``spec``
    replaces the stored one and its ``next_ms`` but keeps ``paused``. True when something was
    written."""
    key = _key(schedule.id)
    while True:
        record = await store.meta_get(key)
        if record is None:
            if await store.meta_swap(key, None, encode(schedule)):
                return True
            continue
        old = _readable(record)
        if old is not None and old.spec == schedule.spec:
            return False
        paused = schedule.paused if old is None else old.paused
        new = StoredSchedule(schedule.id, schedule.spec, schedule.next_ms, paused)
        if await store.meta_swap(key, record.version, encode(new)):
            return True


async def load(store: MetaStore) -> list[StoredSchedule]:
    """Every stored schedule, by id. One whose header cannot be read is listed with an
    empty ``spec``, which does not decode: it shows as unreadable and never fires."""
    return [
        _readable(r) or StoredSchedule(r.key.removeprefix(PREFIX), b"", 0)
        for r in await store.meta_list(PREFIX)
    ]


async def remove(store: MetaStore, schedule_id: str) -> bool:
    """Delete a schedule; False when absent."""
    return await store.meta_delete(_key(schedule_id))


async def pause(
    store: MetaStore, schedule_id: str, paused: bool, next_ms: int | None = None
) -> bool:
    """Set a schedule's ``paused`` flag, and its ``next_ms`` unless None; False when absent."""
    return await _change(
        store,
        schedule_id,
        lambda old: dataclasses.replace(
            old, paused=paused, next_ms=old.next_ms if next_ms is None else next_ms
        ),
    )


async def advance(store: MetaStore, schedule_id: str, expected_ms: int, next_ms: int) -> bool:
    """Move a schedule's ``next_ms`` from ``expected_ms`` to ``next_ms``, only while it is
    still ``expected_ms`` (compare and set): True when this call moved it."""
    return await _change(
        store,
        schedule_id,
        lambda old: (
            dataclasses.replace(old, next_ms=next_ms) if old.next_ms == expected_ms else None
        ),
    )


async def _change(
    store: MetaStore, schedule_id: str, change: Callable[[StoredSchedule], StoredSchedule | None]
) -> bool:
    """Read a stored schedule, ``change`` it and write it back with a compare-and-set, again
    from the start when another process wrote in between. False when it is absent, or when
    ``change`` leaves it as it is (None)."""
    key = _key(schedule_id)
    while True:
        record = await store.meta_get(key)
        if record is None:
            return False
        new = change(decode(record))
        if new is None:
            return False
        if await store.meta_swap(key, record.version, encode(new)):
            return True


def _readable(record: MetaRecord) -> StoredSchedule | None:
    try:
        return decode(record)
    except CorruptRecordError:
        return None
