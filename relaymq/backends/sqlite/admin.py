"""The job store's admin and observation, the history's tallies and the meta store, as plain
functions on a ``sqlite3.Connection`` (the operations of ``ops.py`` for the rest), run by
``SQLiteBackend`` inside one transaction each. No SQL here: see queries.sql.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from relaymq.backends.sqlite import records
from relaymq.backends.sqlite.ops import Conn, Q, allocate_seq
from relaymq.job import TERMINAL, Job, JobState
from relaymq.records.limits import Limits
from relaymq.records.meta import MetaRecord
from relaymq.records.store import Tally

# -- admin and observation ------------------------------------------------------------------


def get_jobs(conn: Conn, now: float, queue: str, ids: Sequence[str]) -> list[Job | None]:
    p = {"queue": queue, "ids": json.dumps(list(ids))}
    found = {row[1]: records.to_job(row) for row in conn.execute(Q["get_jobs"], p)}
    return [found.get(i) for i in ids]


_LISTINGS = {
    JobState.WAITING: "list_waiting",
    JobState.DELAYED: "list_delayed",
    JobState.ACTIVE: "list_active",
    JobState.BLOCKED: "list_blocked",
}


def list_jobs(
    conn: Conn, now: float, queue: str, state: JobState, offset: int, limit: int
) -> list[Job]:
    p = {"queue": queue, "state": state.value, "offset": offset, "limit": limit}
    found = conn.execute(Q[_LISTINGS.get(state, "list_finished")], p).fetchall()
    return [records.to_job_lenient(row, state) for row in found]


def counts(conn: Conn, now: float, queue: str) -> tuple[dict[JobState, int], bool]:
    """Jobs per state, and whether jobs of ``queue`` are in a state nobody knows (the caller
    quarantines them with ``quarantine_strays``, then counts again)."""
    out = {s: 0 for s in JobState}
    strays = False
    for state, n in conn.execute(Q["counts"], {"queue": queue}):
        if state in out:
            out[JobState(state)] = int(n)
        elif n > 0:
            strays = True
    return out, strays


# The batch forms run one statement per job inside the caller's ONE transaction: one round
# trip to the database thread and one commit per batch.


def cancel_jobs(conn: Conn, now: float, queue: str, ids: Sequence[str]) -> list[bool]:
    p: dict[str, Any] = {"queue": queue, "now": now}
    return [conn.execute(Q["cancel"], p | {"id": job_id}).rowcount == 1 for job_id in ids]


def retry_jobs(conn: Conn, now: float, queue: str, ids: Sequence[str]) -> list[bool]:
    done = []
    for job_id in ids:
        p = {"queue": queue, "id": job_id, "seq": allocate_seq(conn, queue, 1), "now": now}
        done.append(conn.execute(Q["retry_job"], p).rowcount == 1)
    return done


def remove_jobs(conn: Conn, now: float, queue: str, ids: Sequence[str]) -> list[bool]:
    p = {"queue": queue}
    return [conn.execute(Q["remove_job"], p | {"id": job_id}).rowcount == 1 for job_id in ids]


def pause(conn: Conn, now: float, queue: str) -> None:
    conn.execute(Q["pause"], {"queue": queue})


def resume(conn: Conn, now: float, queue: str) -> None:
    conn.execute(Q["resume"], {"queue": queue})


def is_paused(conn: Conn, now: float, queue: str) -> bool:
    return conn.execute(Q["is_paused"], {"queue": queue}).fetchone() is not None


def drain(conn: Conn, now: float, queue: str) -> int:
    conn.execute(Q["forget_pending_dependencies"], {"queue": queue})
    return conn.execute(Q["drain"], {"queue": queue}).rowcount


def clean(conn: Conn, now: float, queue: str, state: JobState, older_than: float) -> int:
    if state not in TERMINAL:
        return 0
    p = {"queue": queue, "state": state.value, "cutoff": now - older_than}
    return conn.execute(Q["clean"], p).rowcount


def obliterate(conn: Conn, now: float, queue: str) -> None:
    for name in (
        "obliterate_dependencies",
        "obliterate_jobs",
        "resume",
        "obliterate_counts",
        "obliterate_seq",
        "obliterate_tallies",
        "obliterate_keys",
        "remove_limits",
    ):
        conn.execute(Q[name], {"queue": queue})


def prune_keys(conn: Conn, now: float, queue: str, older_than: float) -> int:
    return int(conn.execute(Q["prune_keys"], {"queue": queue, "cutoff": now - older_than}).rowcount)


def set_limits(conn: Conn, now: float, queue: str, limits: Limits | None) -> None:
    if limits is None or limits.empty:
        conn.execute(Q["remove_limits"], {"queue": queue})
    else:
        conn.execute(
            Q["set_limits"],
            {
                "queue": queue,
                "max_active": limits.max_active,
                "rate": limits.rate,
                "per": limits.per,
                "key_rate": limits.key_rate,
                "key_per": limits.key_per,
            },
        )


def list_limits(conn: Conn, now: float) -> dict[str, Limits]:
    return {
        q: Limits(max_active=m, rate=r, per=p, key_rate=kr, key_per=kp)
        for q, m, r, p, kr, kp in conn.execute(Q["list_limits"])
    }


def list_queues(conn: Conn, now: float) -> list[str]:
    return [r[0] for r in conn.execute(Q["list_queues"])]


# -- history --------------------------------------------------------------------------------


def add_tallies(conn: Conn, now: float, tallies: Sequence[Tally]) -> None:
    conn.executemany(
        Q["add_tally"],
        [
            {
                "queue": t.queue,
                "minute": t.minute,
                "completed": t.completed,
                "retried": t.retried,
                "failed": t.failed,
            }
            for t in tallies
        ],
    )


def tallies(conn: Conn, now: float, queue: str, since: int) -> list[Tally]:
    rows = conn.execute(Q["tallies"], {"queue": queue, "since": since})
    return [Tally(queue, m, c, r, f) for m, c, r, f in rows]


def prune_tallies(conn: Conn, now: float, before: int) -> None:
    conn.execute(Q["prune_tallies"], {"before": before})


# -- meta -----------------------------------------------------------------------------------


def _record(row: Any) -> MetaRecord:
    key, value, version, expires = row
    value = value.encode() if isinstance(value, str) else bytes(value)  # written as text by hand
    return MetaRecord(key, value, version, expires)


def _expires(now: float, ttl: float | None) -> float | None:
    return None if ttl is None else now + ttl


def meta_get(conn: Conn, now: float, key: str) -> MetaRecord | None:
    row = conn.execute(Q["meta_get"], {"key": key, "now": now}).fetchone()
    return None if row is None else _record(row)


def meta_put(conn: Conn, now: float, key: str, value: bytes, ttl: float | None) -> None:
    conn.execute(Q["meta_prune"], {"now": now})
    conn.execute(Q["meta_put"], {"key": key, "value": value, "expires": _expires(now, ttl)})


def meta_swap(
    conn: Conn, now: float, key: str, expected: int | None, value: bytes, ttl: float | None
) -> bool:
    p = {"key": key, "value": value, "expires": _expires(now, ttl), "now": now}
    if expected is None:
        return conn.execute(Q["meta_create"], p).rowcount == 1
    return conn.execute(Q["meta_swap"], {**p, "expected": expected}).rowcount == 1


def meta_list(conn: Conn, now: float, prefix: str) -> list[MetaRecord]:
    return [_record(row) for row in conn.execute(Q["meta_list"], {"prefix": prefix, "now": now})]


def meta_delete(conn: Conn, now: float, key: str) -> bool:
    row = conn.execute(Q["meta_delete"], {"key": key}).fetchone()
    return row is not None and (row[0] is None or row[0] > now)
