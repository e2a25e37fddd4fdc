"""Carries schedules stored by a relaymq before the meta store into it, once, on ``connect``.

Before, each schedule was a document of the ``schedules`` collection (``_id`` its id,
``spec``, ``next_ms``, ``paused``). Each becomes the meta record ``schedule:<id>`` in the form
``relaymq.schedules.store`` writes (a JSON header, a newline, the spec), unless that record
exists already; then the old document goes. Two processes doing it at once create each record
once. Registered workers register again within their registration TTL; leases start afresh.
"""

from __future__ import annotations

import orjson
from pymongo.asynchronous.collection import AsyncCollection

from relaymq.backends.mongodb.meta import MetaCollection
from relaymq.backends.mongodb.records import Document

OLD_SCHEDULES = "schedules"


async def carry_schedules(old: AsyncCollection[Document], meta: MetaCollection) -> int:
    """Move every document of ``old`` into the meta store; how many records were created."""
    created = 0
    async for doc in old.find():
        spec, next_ms = doc.get("spec"), doc.get("next_ms")
        if isinstance(spec, bytes) and isinstance(next_ms, int):
            head = orjson.dumps({"next_ms": next_ms, "paused": bool(doc.get("paused"))})
            value = head + b"\n" + spec
            created += await meta.swap("schedule:" + str(doc["_id"]), None, value, None)
        await old.delete_one({"_id": doc["_id"]})
    return created
