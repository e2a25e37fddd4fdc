"""The job store's admin and observation, the history's tallies and the meta store, as plain
functions on a ``sqlite3.Connection`` (the operations of ``ops.py`` for the rest), run by
``SQLiteBackend`` inside one transaction each. No SQL here: see queries.sql.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from relaymq.backends.sqlite import records
from relaymq.backends.sqlite.limits import stored_limits
from relaymq.backends.sqlite.ops import Conn, Q, allocate_seq
from relaymq.job import TERMINAL, Job, JobState
from relaymq.records.limits import Limits
from relaymq.records.meta import MetaRecord
from relaymq.records.search import JobFilter, search
from relaymq.records.store import Tally, add_counts

# -- admin and observation ------------------------------------------------------------------


def get_jobs(conn: Conn, now: float, queue: str, ids: Sequence[str]) -> list[Job | None]:
    p = {"queue": queue, "ids": json.dumps(list(ids))}
    found = {row[1]: records.to_job(row) for row in conn.execute(Q["get_jobs"], p)}
    return [found.get(i) for i in ids]


def sequence_head(conn: Conn, now: float, queue: str, sequence: str) -> Job | None:
    row = conn.execute(Q["sequence_head"], {"queue": queue, "sequence": sequence}).fetchone()
    return None if row is None else records.to_job_lenient(row, JobState(row[4]))


_SEARCH = ("id_prefix", "task_part", "created_after", "created_before", "args", "needle")
"""The parameters of <search> in queries.sql, in the order of ``search.search``."""
_LISTINGS = {
    JobState.WAITING: "list_waiting",
    JobState.DELAYED: "list_delayed",
    JobState.ACTIVE: "list_active",
    JobState.BLOCKED: "list_blocked",
}


def list_jobs(
    conn: Conn,
    now: float,
    queue: str,
    state: JobState,
    offset: int,
    limit: int,
    where: JobFilter | None = None,
) -> list[Job]:
    p: dict[str, Any] = {"queue": queue, "state": state.value, "offset": offset, "limit": limit}
    p |= zip(_SEARCH, search(where or JobFilter()), strict=True)  # all None: no search
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


CLEAN_BATCH = 1000
"""Most jobs one ``clean`` transaction deletes: claims wait at most that long for the lock."""
VACUUM_PAGES = 2000
"""Most free pages one transaction gives back to the file system (in ``incremental_vacuum``)."""
SLACK = 0.25
"""The share of the file left free for the next jobs (``give_back`` keeps it)."""


def clean(conn: Conn, now: float, queue: str, state: JobState, older_than: float) -> int:
    """One batch of ``clean``: up to ``CLEAN_BATCH`` jobs."""
    if state not in TERMINAL:
        return 0
    p = {"queue": queue, "state": state.value, "cutoff": now - older_than, "batch": CLEAN_BATCH}
    return conn.execute(Q["clean"], p).rowcount


def give_back(conn: Conn, now: float) -> int:
    """Give up to ``VACUUM_PAGES`` free pages back (incremental auto-vacuum) while more than
    ``SLACK`` of the file is free; how many are left to give. Under a steady workload the
    pages a purge frees are taken again by the next jobs: the file keeps them (giving them
    back and growing again would cost every write); after a burst, it shrinks."""
    (free,) = conn.execute(Q["freelist_count"]).fetchone()
    (pages,) = conn.execute(Q["page_count"]).fetchone()
    if free <= pages * SLACK:
        return 0
    conn.execute(Q["incremental_vacuum"]).fetchall()
    return max(0, int(free) - VACUUM_PAGES - int(pages * SLACK))


def obliterate(conn: Conn, now: float, queue: str) -> None:
    for name in (
        "obliterate_dependencies",
        "obliterate_jobs",
        "resume",
        "obliterate_counts",
        "obliterate_seq",
        "obliterate_tallies",
        "obliterate_task_tallies",
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
                "key_max_active": limits.key_max_active,
                "fair": limits.fair,
                "weights": json.dumps(limits.weights),
            },
        )


def list_limits(conn: Conn, now: float) -> dict[str, Limits]:
    return {q: stored_limits(*row) for q, *row in conn.execute(Q["list_limits"])}


def list_queues(conn: Conn, now: float) -> list[str]:
    return [r[0] for r in conn.execute(Q["list_queues"])]


# -- history --------------------------------------------------------------------------------


def add_tallies(conn: Conn, now: float, tallies: Sequence[Tally]) -> None:
    """Add each (queue, task, minute)'s counts; a task's histograms are read and added to in
    this write transaction (SQLite has no arrays to add up in SQL)."""
    counts = [t for t in tallies if not t.task]
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
            for t in counts
        ],
    )
    for t in tallies:
        if not t.task:
            continue
        key = {"queue": t.queue, "task": t.task, "minute": t.minute}
        stored = conn.execute(Q["task_tally_durations"], key).fetchone() or (None, None)
        run_times, pickups = (_counts(stored[0]), _counts(stored[1]))
        conn.execute(
            Q["add_task_tally"],
            {
                **key,
                "completed": t.completed,
                "retried": t.retried,
                "failed": t.failed,
                "run_times": json.dumps(add_counts(run_times, t.run_times)),
                "pickups": json.dumps(add_counts(pickups, t.pickups)),
            },
        )


def _counts(stored: Any) -> tuple[int, ...]:
    """A stored histogram (a JSON array of counts); an unreadable one counts as empty."""
    try:
        counts = json.loads(stored) if isinstance(stored, str) else []
        return tuple(int(n) for n in counts) if isinstance(counts, list) else ()
    except (TypeError, ValueError):
        return ()


def tallies(conn: Conn, now: float, queue: str, since: int) -> list[Tally]:
    rows = conn.execute(Q["tallies"], {"queue": queue, "since": since})
    return [
        Tally(queue, m, c, r, f, task, _counts(runs), _counts(picks))
        for m, task, c, r, f, runs, picks in rows
    ]


def prune_tallies(conn: Conn, now: float, before: int) -> None:
    conn.execute(Q["prune_tallies"], {"before": before})
    conn.execute(Q["prune_task_tallies"], {"before": before})


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
