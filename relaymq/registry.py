"""The worker registry, on the meta store: each worker keeps a record ``worker:<id>`` that
lapses ``ttl`` seconds (on the backend's clock) after its last registration, so a worker that
died leaves the list by itself. Written once here for every backend."""

from __future__ import annotations

import logging

import orjson

from relaymq.backends.meta import MetaStore
from relaymq.records.meta import MetaRecord
from relaymq.records.store import WorkerInfo

log = logging.getLogger("relaymq.registry")

PREFIX = "worker:"


async def register(store: MetaStore, info: WorkerInfo, ttl: float) -> None:
    """Record (or renew) ``info``; it is listed until ``ttl`` seconds pass without renewal."""
    record = info.to_record()
    record["ttl"] = ttl  # seen_at is the record's expiry less its ttl: the backend's clock
    await store.meta_put(PREFIX + info.id, orjson.dumps(record), ttl)


async def unregister(store: MetaStore, worker_id: str) -> None:
    """Remove a worker from the registry (nothing when it is not there)."""
    await store.meta_delete(PREFIX + worker_id)


async def list_workers(store: MetaStore) -> list[WorkerInfo]:
    """Workers whose registration has not lapsed, by id; a damaged record is skipped."""
    workers = []
    for r in await store.meta_list(PREFIX):
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
