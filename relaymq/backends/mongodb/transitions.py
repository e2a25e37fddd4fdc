"""The filters and update pipelines of every job transition (MongoDB's answer to a .sql file).

Each function takes plain values and returns a query filter or an update pipeline; nothing here
does I/O. Every transition is a single-document update, atomic on the server, and every write
after a claim carries ``fenced(claim)`` (still ``active``, same token) in its filter. Recovery
adds "still stale" to the same filter, so the re-check and the write are one step.

Time: ``Now`` produces either ``$$NOW`` (the server's clock, the default) or a fixed date from a
test clock, so the same filters and pipelines serve both. Strings from callers (errors, worker
ids) are wrapped in ``$literal`` because a pipeline would read ``"$x"`` as a field path.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import Any, Final

from bson import Binary

from relaymq.backends.corrupt import STATES
from relaymq.backends.mongodb.records import INT64, Document, to_date
from relaymq.job import Claim, JobState
from relaymq.records.search import ArgMatch, JobFilter
from relaymq.records.store import Beat, Clock, Outcome, Settle

WAITING: Final = str(JobState.WAITING)
DELAYED: Final = str(JobState.DELAYED)
ACTIVE: Final = str(JobState.ACTIVE)
CLAIMABLE: Final = [WAITING, DELAYED]
LIVE: Final = [str(JobState.BLOCKED), WAITING, DELAYED, ACTIVE]
RETRYABLE: Final = [str(JobState.FAILED), str(JobState.EXPIRED), str(JobState.CANCELLED)]

CLAIM_ORDER: Final = [("priority", 1), ("ready_at", 1), ("seq", 1)]
"""Lower priority number first, then place in line, then FIFO sequence."""


class Now:
    """The backend's clock inside queries: ``$$NOW`` on the server, or a test clock's reading."""

    def __init__(self, clock: Clock | None) -> None:
        self._clock = clock

    def expr(self, offset: float = 0.0) -> Any:
        """An aggregation expression for now + ``offset`` seconds (for pipeline updates)."""
        if self._clock is None:
            return "$$NOW" if offset == 0 else {"$add": ["$$NOW", round(offset * 1000)]}
        return to_date(self._clock() + offset)

    def compare(self, field: str, op: str, offset: float = 0.0) -> Document:
        """A filter for ``field <op> now + offset`` (``op`` is ``$lt``, ``$lte``, ``$gt``...)."""
        if self._clock is not None:
            return {field: {op: to_date(self._clock() + offset)}}
        cond: Any = {op: [f"${field}", self.expr(offset)]}
        if op in ("$lt", "$lte"):  # in expressions null sorts below dates; queries skip it
            cond = {"$and": [cond, {"$gt": [f"${field}", None]}]}
        return {"$expr": cond}

    def local(self) -> float:
        """Seconds since the epoch when no server reading is at hand (an empty claim)."""
        return self._clock() if self._clock is not None else time.time()


def literal(value: Any) -> Any:
    return {"$literal": value}


def _binary(value: bytes | None) -> Binary | None:
    return None if value is None else Binary(value)


# -- claim ------------------------------------------------------------------------------------


def claimable(queue: str, now: Now) -> Document:
    """Waiting jobs and delayed jobs that have fallen due, of one queue."""
    return {"queue": queue, "state": {"$in": CLAIMABLE}, **now.compare("ready_at", "$lte")}


def claim_again(ids: list[Any], now: Now) -> Document:
    """The candidates of a batch claim that are still claimable (re-checked per document)."""
    return {"_id": {"$in": ids}, "state": {"$in": CLAIMABLE}, **now.compare("ready_at", "$lte")}


def _plus_one(field: str) -> Document:
    """``field + 1``, or null when the stored value is not a number: one damaged document must
    not make the whole ``update_many`` fail (the read-back then fails that job, see backend).

    ``int``, not ``long``: pymongo writes small ints as int32, and mongoeco (unlike MongoDB)
    does not match an int32 filter value against a stored int64."""
    number = {"$convert": {"input": f"${field}", "to": "int", "onError": None, "onNull": None}}
    return {"$add": [number, 1]}


def claim_update(
    worker_id: str, claim_id: str, now: Now, decided: float | None = None
) -> list[Document]:
    """The claim's update; ``decided``: the time a limited claim's allowance was reckoned at,
    which the claim then carries (its start counts in that time's rate window)."""
    at = now.expr() if decided is None else to_date(decided)
    return [
        {
            "$set": {
                "state": ACTIVE,
                "token": _plus_one("token"),
                "attempts": _plus_one("attempts"),
                "claimed_at": at,
                "heartbeat_at": at,
                "worker_id": literal(worker_id),
                "claim_id": literal(claim_id),
            }
        }
    ]


def strays(queue: str) -> Document:
    """The jobs of ``queue`` in a state nobody knows (``relaymq.backends.corrupt``): the
    complement of the known states, which the (queue, state, ...) index bounds."""
    return {"queue": queue, "state": {"$nin": sorted(STATES)}}


def fail_unreadable(error: str, now: Now) -> list[Document]:
    """Fail a claimed job whose document cannot be read (the claim's other jobs go on)."""
    return [
        {
            "$set": {
                "state": str(JobState.FAILED),
                "error": literal(error),
                "finished_at": now.expr(),
                "worker_id": None,
            }
        }
    ]


# -- after a claim: all fenced ----------------------------------------------------------------


def fenced(claim: Claim) -> Document:
    """Still active with this claim's token."""
    return {"queue": claim.queue, "id": claim.job_id, "state": ACTIVE, "token": claim.token}


def beat_update(beat: Beat, now: Now) -> list[Document]:
    fields: Document = {"heartbeat_at": now.expr()}
    if beat.progress is not None:
        fields["progress"] = _binary(beat.progress)
    return [{"$set": fields}]


def settle_update(s: Settle, now: Now, write_id: str, seq: int | None) -> list[Document]:
    """The pipeline for one outcome; ``seq`` is the new FIFO sequence of a RETRY without delay."""
    fields: Document = {"worker_id": None, "write_id": literal(write_id)}
    if s.outcome is Outcome.COMPLETE:
        fields |= {"state": str(JobState.COMPLETED), "result": _binary(s.result)}
        fields["finished_at"] = now.expr()
    elif s.outcome in (Outcome.FAIL, Outcome.EXPIRE, Outcome.CANCEL):
        state = {
            Outcome.FAIL: JobState.FAILED,
            Outcome.EXPIRE: JobState.EXPIRED,
            Outcome.CANCEL: JobState.CANCELLED,
        }[s.outcome]
        fields |= {"state": str(state), "error": literal(s.error), "finished_at": now.expr()}
    elif s.outcome is Outcome.RETRY and s.delay > 0:
        fields |= {"state": DELAYED, "error": literal(s.error), "ready_at": now.expr(s.delay)}
    elif s.outcome is Outcome.RETRY:  # back in line at once, behind every job already there
        fields |= {"state": WAITING, "error": literal(s.error), "ready_at": now.expr()}
        fields["seq"] = seq
    else:  # RELEASE: keeps its place in line (ready_at and seq), gives back the attempt
        fields |= {"state": WAITING, "attempts": {"$add": ["$attempts", -1]}}
    if s.keep > 0:
        fields["attempt_history"] = with_attempt(s, now)
    return [{"$set": fields}]


def with_attempt(s: Settle, now: Now) -> Document:
    """The job's attempt history with the attempt ``s`` ends added, the last ``s.keep`` of
    them (``relaymq.records.store.with_attempt``): ``relaymq.job.Attempt``'s stored form, made
    of the document as it was before this stage (attempts, claimed_at, worker_id). A history
    that is not an array starts afresh."""
    entry = {
        "attempt": "$attempts",
        "outcome": literal(s.outcome.value),
        "started_at": "$claimed_at",
        "ended_at": now.expr(),
        "worker": "$worker_id",
        "ran_for": literal(s.ran_for),
        "error": literal(None if s.outcome is Outcome.COMPLETE else s.error),
    }
    history = {
        "$cond": [{"$isArray": "$attempt_history"}, "$attempt_history", []],
    }
    return {"$slice": [{"$concatArrays": [history, [entry]]}, -s.keep]}


# -- recovery ---------------------------------------------------------------------------------


def stalled(queue: str, threshold: float, now: Now) -> Document:
    """Active jobs whose last sign of life is older than ``threshold`` seconds.

    ``heartbeat_at`` is set with ``claimed_at`` at the claim and only moves forward, so it is
    the newer of the two.
    """
    return {"queue": queue, "state": ACTIVE, **now.compare("heartbeat_at", "$lt", -threshold)}


def still_stalled(doc_id: Any, token: int, threshold: float, now: Now) -> Document:
    """Re-check in the write itself: still active, same token, still stale."""
    return {
        "_id": doc_id,
        "state": ACTIVE,
        "token": token,
        **now.compare("heartbeat_at", "$lt", -threshold),
    }


def requeue_stalled(stalls: int, seq: int, now: Now, write_id: str) -> list[Document]:
    fields: Document = {
        "state": WAITING,
        "stalls": stalls + 1,
        "worker_id": None,
        "ready_at": now.expr(),
        "seq": seq,
        "write_id": literal(write_id),
    }
    return [{"$set": fields}]


def fail_stalled(error: str, now: Now, write_id: str) -> list[Document]:
    fields: Document = {
        "state": str(JobState.FAILED),
        "error": literal(error),
        "worker_id": None,
        "finished_at": now.expr(),
        "write_id": literal(write_id),
    }
    return [{"$set": fields}]


# -- admin ------------------------------------------------------------------------------------


def cancel_update(now: Now) -> list[Document]:
    # One $set stage reads the document as it was, so cancel_requested sees the old state.
    return [
        {
            "$set": {
                "cancel_requested": {"$eq": ["$state", ACTIVE]},
                "state": str(JobState.CANCELLED),
                "error": literal("cancelled by request"),
                "finished_at": now.expr(),
                "worker_id": None,
            }
        }
    ]


def manual_retry_update(seq: int, now: Now) -> list[Document]:
    return [
        {
            "$set": {
                "state": WAITING,
                "attempts": 0,
                "stalls": 0,
                "cancel_requested": False,
                "finished_at": None,
                "ready_at": now.expr(),
                "created_at": now.expr(),
                "seq": seq,
            }
        }
    ]


def matching(where: JobFilter) -> Document:
    """The conditions of a search (``JobFilter``) as a query filter: exact on the job's fields,
    and for its argument conditions a cut that keeps every job meeting them (and some that do
    not: ``JobFilter.matches`` decides), over the decoded copy of the payload (``arguments``),
    and every job stored without one."""
    found: Document = {}
    if where.args:
        found["$or"] = [
            {"arguments": {"$exists": False}},
            {"$and": [argument_cut(a) for a in where.args]},
        ]
    if where.id_prefix is not None:
        found["id"] = {"$regex": "^" + re.escape(where.id_prefix)}
    if where.task_contains is not None:
        found["task"] = {"$regex": re.escape(where.task_contains)}
    created: Document = {}
    if where.created_after is not None:
        created["$gte"] = to_date(where.created_after)
    if where.created_before is not None:
        created["$lt"] = to_date(where.created_before)
    if created:
        found["created_at"] = created
    return found


def argument_cut(a: ArgMatch) -> Document:
    """A filter that keeps every job whose ``arguments`` meet ``a``. MongoDB's equality is
    wider than the rule's: it also takes an array holding the value, a missing key for null,
    and a number of the other type (``42`` for ``42.0``); ``~`` takes every number, whose text
    only the rule reads."""
    steps = [str(step) for step in a.path]
    if any(not s or "." in s or s.startswith("$") or "\0" in s for s in steps):
        return {"arguments": {"$exists": False}}  # a name no stored copy holds (arguments_of)
    path = ".".join(["arguments", *steps])
    if a.contains:
        return {"$or": [{path: {"$regex": re.escape(str(a.value))}}, {path: {"$type": "number"}}]}
    value = a.value
    if isinstance(value, int) and not isinstance(value, bool) and value not in INT64:
        value = float(value)  # BSON has no such integer; a stored double may equal it
    return {path: {"$eq": value}}  # $eq: a value is never read as an operator


def lock_filter(name: str, owner: str, now: Now) -> Document:
    """The lease is free for ``owner``: held by it, or lapsed. (Absent: the upsert inserts.)"""
    return {"_id": name, "$or": [{"owner": owner}, now.compare("expires_at", "$lte")]}


def lock_update(owner: str, ttl: float, now: Now) -> list[Document]:
    return [{"$set": {"owner": literal(owner), "expires_at": now.expr(ttl)}}]


def next_sequence(count: int, now: Now, sequenced: bool = False) -> list[Document]:
    """Reserve ``count`` FIFO sequences of a queue and read the clock, in one write; with
    ``sequenced``, mark the queue as one with jobs of sequences."""
    fields: Document = {"seq": {"$add": [{"$ifNull": ["$seq", 0]}, count]}, "now": now.expr()}
    if sequenced:
        fields["sequences"] = True
    return [{"$set": fields}]


def register_update(info: dict[str, Any], ttl: float, now: Now) -> list[Document]:
    fields = {k: literal(v) for k, v in info.items()}
    return [{"$set": {**fields, "seen_at": now.expr(), "expires_at": now.expr(ttl)}}]


def as_date(value: Any) -> dt.datetime:
    if not isinstance(value, dt.datetime):
        raise TypeError(f"expected a date, got {type(value).__name__}")
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
