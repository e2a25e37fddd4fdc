"""The worker registry, on the meta store: each worker keeps a record ``worker:<id>`` that
lapses ``ttl`` seconds (on the backend's clock) after its last registration, so a worker that
died leaves the list by itself. A second record, ``worker-seen:<id>``, lapses ``SILENT_KEPT``
seconds later: a worker gone silent (killed, frozen, cut off) is shown as such for that long
(``list_silent``) instead of vanishing without a word. Written once here for every backend."""

from __future__ import annotations

import logging

import orjson

from relaymq.backends.meta import MetaStore
from relaymq.records.meta import MetaRecord
from relaymq.records.store import WorkerInfo

log = logging.getLogger("relaymq.registry")

PREFIX = "worker:"
SEEN = "worker-seen:"
SILENT_KEPT = 3600.0
"""Seconds a worker that stopped renewing its registration stays listed as silent."""


async def register(store: MetaStore, info: WorkerInfo, ttl: float) -> None:
    """Record (or renew) ``info``; it is listed until ``ttl`` seconds pass without renewal,
    and as silent for ``SILENT_KEPT`` seconds more."""
    record = info.to_record()
    record["ttl"] = ttl  # seen_at is the record's expiry less its ttl: the backend's clock
    await store.meta_put(PREFIX + info.id, orjson.dumps(record), ttl)
    record["ttl"] = ttl + SILENT_KEPT
    await store.meta_put(SEEN + info.id, orjson.dumps(record), ttl + SILENT_KEPT)


async def unregister(store: MetaStore, worker_id: str) -> None:
    """Remove a worker from the registry (nothing when it is not there)."""
    await store.meta_delete(PREFIX + worker_id)
    await store.meta_delete(SEEN + worker_id)


async def list_workers(store: MetaStore) -> list[WorkerInfo]:
    """Workers whose registration has not lapsed, by id; a damaged record is skipped."""
    return _read_all(await store.meta_list(PREFIX))


async def list_silent(store: MetaStore) -> list[WorkerInfo]:
    """Workers whose registration lapsed within the last ``SILENT_KEPT`` seconds without
    their unregistering (they stopped without a word), by id, as they were last seen."""
    seen = _read_all(await store.meta_list(SEEN))  # first: a worker new since is not in it
    live = {w.id for w in await list_workers(store)}
    return [w for w in seen if w.id not in live]


def _read_all(records: list[MetaRecord]) -> list[WorkerInfo]:
    workers = []
    for r in records:
        info = _read(r)
        if info is not None:
            workers.append(info)
    return workers


def _read(r: MetaRecord) -> WorkerInfo | None:
    try:
        record = orjson.loads(r.value)
        seen_at = 0.0 if r.expires is None else r.expires - float(record.get("ttl", 0.0))
        return WorkerInfo.from_record(record, seen_at)
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as e:
        log.warning("skipped the unreadable worker record %s: %s", r.key, e)
        return None
