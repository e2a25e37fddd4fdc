"""Carries schedules stored by a relaymq before the meta store into it, once, on ``connect``.

Before, each schedule was a hash ``<prefix>:{<prefix>:global}:schedule:<id>`` (``spec``,
``next_ms``, ``paused``) listed in the set ``...:schedules``. Each becomes the meta record
``schedule:<id>`` in the form ``relaymq.schedules.store`` writes (a JSON header, a newline, the
spec), unless that record exists already; then the old keys go. Two processes doing it at once
create each record once (``meta_swap`` from absent). Registered workers and leases are not
carried over: workers register again within their registration TTL, and leases are taken
afresh.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson

from relaymq.backends.redis.transport import Transport

Create = Callable[[str, bytes], Awaitable[bool]]
"""Creates a meta record unless it exists (``meta_swap(key, None, value)``)."""


def _old(prefix: str) -> tuple[str, str]:
    g = f"{prefix}:{{{prefix}:global}}"
    return g + ":schedules", g + ":schedule:"


async def carry_schedules(t: Transport, prefix: str, create: Create) -> int:
    """Move every old schedule into the meta store; how many records were created."""
    index, hash_prefix = _old(prefix)
    [ids] = await t.run([("SMEMBERS", index)], "carry_schedules")
    created = 0
    for raw in sorted(ids):
        schedule_id = raw.decode()
        key = hash_prefix + schedule_id
        [(spec, next_ms, paused)] = await t.run(
            [("HMGET", key, "spec", "next_ms", "paused")], "carry_schedules"
        )
        if spec is not None and next_ms is not None:
            head = orjson.dumps({"next_ms": int(next_ms), "paused": paused == b"1"})
            if await create("schedule:" + schedule_id, head + b"\n" + spec):
                created += 1
        await t.run([("DEL", key), ("SREM", index, raw)], "carry_schedules")
    return created
