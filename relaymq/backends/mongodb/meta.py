"""The meta store on MongoDB (``relaymq.backends.meta``): the ``meta`` collection, one document
per record, ``{_id: key, value: binary, version: int, expires: date | null}``.

Each operation is one conditional write or one read, compared on the backend's clock
(``$$NOW``, or the test clock's reading): a create is an upsert whose filter matches only a
lapsed record, so a live one makes it collide on ``_id``; a swap matches the version read.
"""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from relaymq.backends.mongodb.records import Document, text, to_seconds
from relaymq.backends.mongodb.transitions import Now, as_date, literal
from relaymq.records.meta import MetaRecord

TOP = "\U0010ffff"  # above every character a key may hold next: the end of a prefix range


class MetaCollection:
    """The meta store's five operations on ``collection``, on the clock ``now``."""

    def __init__(self, collection: AsyncCollection[Document], now: Now) -> None:
        self._c = collection
        self._now = now

    def _live(self) -> Document:
        return {"$or": [{"expires": None}, self._now.compare("expires", "$gt")]}

    def _lapsed(self) -> Document:
        # null is no date; said outright, as some servers match it against $lte a date
        return {"$and": [{"expires": {"$ne": None}}, self._now.compare("expires", "$lte")]}

    def _write(self, value: bytes, ttl: float | None) -> list[Document]:
        expires = None if ttl is None else self._now.expr(ttl)
        version = {"$add": [{"$ifNull": ["$version", 0]}, 1]}
        return [{"$set": {"value": literal(value), "version": version, "expires": expires}}]

    async def get(self, key: str) -> MetaRecord | None:
        doc = await self._c.find_one({"_id": text(key, "meta key"), **self._live()})
        return None if doc is None else _record(doc)

    async def put(self, key: str, value: bytes, ttl: float | None) -> None:
        await self._c.update_one(
            {"_id": text(key, "meta key")}, self._write(value, ttl), upsert=True
        )

    async def swap(self, key: str, expected: int | None, value: bytes, ttl: float | None) -> bool:
        text(key, "meta key")
        if expected is None:
            try:  # a live record does not match, and the insert collides with it on _id
                await self._c.update_one(
                    {"_id": key, **self._lapsed()}, self._write(value, ttl), upsert=True
                )
            except DuplicateKeyError:
                return False
            return True
        if not isinstance(expected, int):
            raise TypeError(f"expected version must be an int, got {type(expected).__name__}")
        found = await self._c.update_one(
            {"_id": key, "version": expected, **self._live()}, self._write(value, ttl)
        )
        return found.matched_count == 1

    async def list(self, prefix: str) -> list[MetaRecord]:
        text(prefix, "meta key prefix")
        keys = {"$gte": prefix, "$lt": prefix + TOP}
        await self._c.delete_many({"_id": keys, **self._lapsed()})
        query = {"_id": keys, **self._live()}
        return [
            _record(d)
            async for d in self._c.find(query).sort("_id")
            if str(d["_id"]).startswith(prefix)
        ]

    async def delete(self, key: str) -> bool:
        text(key, "meta key")
        live = await self._c.delete_one({"_id": key, **self._live()})
        if live.deleted_count == 1:
            return True
        await self._c.delete_one({"_id": key})  # a lapsed one, if any
        return False


def _record(doc: Any) -> MetaRecord:
    expires = doc.get("expires")
    return MetaRecord(
        str(doc["_id"]),
        bytes(doc["value"]),
        int(doc["version"]),
        None if expires is None else to_seconds(as_date(expires)),
    )
