"""The contract's operations as plain functions on a ``sqlite3.Connection``.

They run on the backend's database thread. Each takes the connection and ``now`` (the backend's
clock, read after the write lock was taken) and is called inside ONE transaction by
``SQLiteBackend``: writes inside ``BEGIN IMMEDIATE ... COMMIT``, reads as a single statement.
Functions are in the order of ``relaymq.backends.base``. No SQL here: see queries.sql.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from relaymq.backends.corrupt import state_problem
from relaymq.backends.sqlfile import named_queries
from relaymq.backends.sqlite import records
from relaymq.backends.sqlite.eventlog import publish
from relaymq.backends.sqlite.limits import count_starts, read_gate
from relaymq.errors import CorruptRecordError
from relaymq.job import TERMINAL, Job, JobState, NewJob
from relaymq.policy import (
    KEY_SCAN,
    DependentStep,
    KeyBudget,
    KeyStep,
    dependencies_at_enqueue,
    key_step,
)
from relaymq.records import events
from relaymq.records.store import (
    OUTCOME_STATE,
    Beat,
    BeatResult,
    ClaimBatch,
    Enqueued,
    Outcome,
    Recovered,
    Settle,
    dependent,
    keyed,
)

Conn = sqlite3.Connection
Q = named_queries(__package__, "queries.sql")
"""The statements of queries.sql, by name."""


def allocate_seq(conn: Conn, queue: str, n: int) -> int:
    """Take ``n`` FIFO numbers of ``queue``; returns the first one."""
    (last,) = conn.execute(Q["allocate_seq"], {"queue": queue, "n": n}).fetchone()
    return int(last) - n + 1


# -- producer -------------------------------------------------------------------------------


def enqueue(conn: Conn, now: float, jobs: Sequence[NewJob]) -> list[Enqueued]:
    if keyed(jobs):
        return [_enqueue_keyed(conn, now, new) for new in jobs]
    if dependent(jobs):
        return [_enqueue_dependent(conn, now, new) for new in jobs]
    by_queue: dict[str, list[int]] = {}
    for i, new in enumerate(jobs):
        by_queue.setdefault(new.queue, []).append(i)
    duplicate = [False] * len(jobs)
    inserts: list[dict[str, Any]] = []
    for queue, indexes in by_queue.items():
        ids = [jobs[i].id for i in indexes]
        seen = {
            r[0] for r in conn.execute(Q["existing_ids"], {"queue": queue, "ids": json.dumps(ids)})
        }
        fresh: list[NewJob] = []
        for i in indexes:
            if jobs[i].id in seen:
                duplicate[i] = True
            else:
                seen.add(jobs[i].id)
                fresh.append(jobs[i])
        if not fresh:
            continue
        seq = allocate_seq(conn, queue, len(fresh))
        for offset, new in enumerate(fresh):
            delayed = new.delay > 0
            inserts.append(
                {
                    "queue": queue,
                    "id": new.id,
                    "task": new.task,
                    "payload": new.payload,
                    "state": JobState.DELAYED.value if delayed else JobState.WAITING.value,
                    "priority": new.priority,
                    "seq": seq + offset,
                    "now": now,
                    "run_at": now + new.delay if delayed else None,
                    "ttl": new.ttl,
                    "max_attempts": new.max_attempts,
                    "timeout": new.timeout,
                    "traceparent": new.traceparent,
                    "depends_on": None,
                    "dep_policy": None,
                    "pending_deps": None,
                    "limit_key": new.limit_key,
                    "sequence": new.sequence,
                    "seq_failure": None if new.sequence is None else new.sequence_on_failure.value,
                }
            )
    conn.executemany(Q["insert_job"], inserts)
    return [Enqueued(new.id, duplicate=dup) for new, dup in zip(jobs, duplicate, strict=True)]


def _enqueue_dependent(conn: Conn, now: float, new: NewJob) -> Enqueued:
    """One job of a batch with dependencies, in the batch's transaction, stored as
    ``relaymq.policy.dependencies_at_enqueue`` says: blocked (job_deps tells it when each
    dependency ends), failed at once, or waiting."""
    if not new.depends_on:
        return enqueue(conn, now, [new])[0]
    ids = list(dict.fromkeys(new.depends_on))
    if conn.execute(
        Q["existing_ids"], {"queue": new.queue, "ids": json.dumps([new.id])}
    ).fetchone():
        return Enqueued(new.id, duplicate=True)
    states = dict(
        conn.execute(Q["dependency_states"], {"queue": new.queue, "ids": json.dumps(ids)})
    )
    start = dependencies_at_enqueue(ids, states, new.on_dependency_failure)
    row = {
        "queue": new.queue,
        "id": new.id,
        "task": new.task,
        "payload": new.payload,
        "state": JobState.BLOCKED.value if start.step is DependentStep.BLOCKED else "waiting",
        "priority": new.priority,
        "seq": allocate_seq(conn, new.queue, 1),
        "now": now,
        "run_at": None,
        "ttl": new.ttl,
        "max_attempts": new.max_attempts,
        "timeout": new.timeout,
        "traceparent": new.traceparent,
        "depends_on": json.dumps(list(new.depends_on)),
        "dep_policy": new.on_dependency_failure.value,
        "pending_deps": len(start.waits_for),
        "limit_key": new.limit_key,
        "sequence": new.sequence,
        "seq_failure": None if new.sequence is None else new.sequence_on_failure.value,
    }
    conn.execute(Q["insert_job"], row)
    if start.step is DependentStep.FAILED:
        conn.execute(
            Q["fail_dependent"],
            {"queue": new.queue, "id": new.id, "error": start.error, "now": now},
        )
        return Enqueued(new.id)
    for dep_id in start.waits_for:
        p = {"queue": new.queue, "dep_id": dep_id, "dependent": new.id}
        conn.execute(Q["add_dependency"], p)
        conn.execute(Q["mark_dependency"], p)
    return Enqueued(new.id)


def _enqueue_keyed(conn: Conn, now: float, new: NewJob) -> Enqueued:
    """One job of a batch with key rules, in the batch's transaction (``KeyRule``)."""
    rule = new.rule
    if (
        rule is None
        or conn.execute(
            Q["existing_ids"], {"queue": new.queue, "ids": json.dumps([new.id])}
        ).fetchone()
    ):
        return enqueue(conn, now, [dataclasses.replace(new, rule=None)])[0]
    replaced = None
    held = conn.execute(Q["key_holder"], {"queue": new.queue, "key": rule.key}).fetchone()
    holder, until, holder_state = held if held is not None else (None, None, None)
    step = key_step(rule.mode, holder_state, until is not None and until > now)
    if step is KeyStep.DUPLICATE:
        return Enqueued(str(holder), duplicate=True)
    if step is KeyStep.REPLACE:
        conn.execute(Q["remove_job"], {"queue": new.queue, "id": holder})
        replaced = holder
    conn.execute(
        Q["take_key"],
        {"queue": new.queue, "key": rule.key, "job_id": new.id, "until": now + rule.window},
    )
    enqueue(conn, now, [dataclasses.replace(new, rule=None)])
    return Enqueued(new.id, replaced=replaced)


# -- worker ---------------------------------------------------------------------------------


def claim(conn: Conn, now: float, queues: Sequence[str], worker_id: str, limit: int) -> ClaimBatch:
    claimed: list[Job] = []
    limited: dict[str, float | None] = {}
    for queue in queues:
        gate = read_gate(conn, now, queue, limit - len(claimed))
        if gate.paused:
            continue
        _promote_due(conn, now, queue)
        a = gate.allowance
        before = len(claimed)
        stop = limit if a is None else before + a.take
        budget = gate.budget(now)
        if budget is not None:
            claimed += _claim_within(conn, now, queue, worker_id, stop - before, budget)
        while budget is None and len(claimed) < stop:
            want = stop - len(claimed)
            params = {"queue": queue, "limit": want, "now": now, "worker_id": worker_id}
            taken = conn.execute(Q["claim"], params).fetchall()
            good: list[Job] = []
            for row in taken:
                bad = records.problems(row)
                if bad:  # out of the line and into the DLQ, so it never blocks the head again
                    _fail_corrupt(conn, now, row, bad)
                else:
                    good.append(records.build(row))
            good.sort(key=lambda j: (j.priority, j.seq))
            claimed += good
            if len(taken) < want or len(good) == len(taken):
                break  # the queue is empty, or the batch is full
        if gate.limits is not None:
            count_starts(conn, queue, gate, len(claimed) - before, budget)
        if a is not None and len(claimed) == stop < limit:
            limited[queue] = a.retry_in
        if budget is not None and len(claimed) < stop and budget.held_back:
            limited[queue] = budget.retry_in(now)
        if len(claimed) < stop and queue not in limited and _sequence_waiting(conn, queue):
            limited[queue] = None  # held back by sequences: they start when jobs end
    return ClaimBatch(claimed, now, limited)


def _sequence_waiting(conn: Conn, queue: str) -> bool:
    return bool(conn.execute(Q["sequence_waiting"], {"queue": queue}).fetchone()[0])


def _claim_within(
    conn: Conn, now: float, queue: str, worker_id: str, want: int, budget: KeyBudget
) -> list[Job]:
    """Up to ``want`` waiting jobs of ``queue`` in claim order, past those whose limit key has
    used its window or is at its cap (``KEY_SCAN`` jobs looked at, at most)."""
    if want <= 0:
        return []
    picked: list[int] = []
    while True:
        p = {"queue": queue, "spent": json.dumps(budget.excluded()), "scan": KEY_SCAN}
        for rowid, key in conn.execute(Q["keyed_candidates"], p).fetchall():
            if len(picked) == want:
                break
            if rowid not in picked and budget.take(key):
                picked.append(rowid)
        if len(picked) == want or not budget.next_round():
            break  # else: every key with waiting jobs had its turn; look again, a new round
    spent = budget.spent()
    p = {"queue": queue, "spent": json.dumps(spent), "picked": json.dumps(picked)}
    if spent and conn.execute(Q["spent_waiting"], p).fetchone()[0]:
        budget.held_back = True  # jobs of those keys were left out of the candidates
    if not picked:
        return []
    rows = conn.execute(
        Q["claim_rowids"], {"rowids": json.dumps(picked), "now": now, "worker_id": worker_id}
    ).fetchall()
    place = {rowid: i for i, rowid in enumerate(picked)}
    good: list[tuple[int, Job]] = []
    for row in rows:
        bad = records.problems(row)
        if bad:
            _fail_corrupt(conn, now, row, bad)
        else:
            good.append((place[row[records.ROWID]], records.build(row)))
    return [job for _, job in sorted(good, key=lambda p: p[0])]  # in the order taken


def _promote_due(conn: Conn, now: float, queue: str) -> None:
    due = conn.execute(Q["due_delayed"], {"queue": queue, "now": now}).fetchall()
    if not due:
        return
    seq = allocate_seq(conn, queue, len(due))
    conn.executemany(Q["promote"], [{"rowid": r[0], "seq": seq + i} for i, r in enumerate(due)])


def _fail_corrupt(conn: Conn, now: float, row: tuple[Any, ...], bad: list[str]) -> None:
    error = records.describe(row, bad)
    conn.execute(Q["fail_corrupt"], {"rowid": row[records.ROWID], "error": error, "now": now})


def stray_states(conn: Conn, queue: str) -> list[str]:
    """The states of ``queue``'s counters that hold jobs and are no job state (damage)."""
    found = conn.execute(Q["stray_states"], {"queue": queue}).fetchall()
    return [s for (s,) in found if state_problem(s) is not None]


def quarantine_strays(conn: Conn, now: float, queue: str) -> list[str]:
    """Fail the jobs of ``queue`` whose state is none of relaymq's into the DLQ, with the
    reason (``relaymq.backends.corrupt``: no line, count or listing would ever show them);
    their ids. Costs one read of the counters when there are none."""
    ids: list[str] = []
    for state in stray_states(conn, queue):
        for row in conn.execute(Q["jobs_in_state"], {"queue": queue, "state": state}).fetchall():
            _fail_corrupt(conn, now, row, records.problems(row))
            ids.append(str(row[1]))
    return ids


def heartbeat(conn: Conn, now: float, beats: Sequence[Beat]) -> list[BeatResult]:
    out: list[BeatResult] = []
    for beat in beats:
        c = beat.claim
        params = {
            "queue": c.queue,
            "id": c.job_id,
            "token": c.token,
            "now": now,
            "progress": beat.progress,
        }
        if conn.execute(Q["heartbeat"], params).rowcount == 1:
            out.append(BeatResult(held=True))
            continue
        status = conn.execute(Q["job_status"], {"queue": c.queue, "id": c.job_id}).fetchone()
        cancelled = status is not None and status[1] == c.token and bool(status[2])
        out.append(BeatResult(held=False, cancel_requested=cancelled))
    return out


def settle(conn: Conn, now: float, settles: Sequence[Settle]) -> tuple[list[bool], bool]:
    """The answers, and whether a job went back to waiting (wake local waiters)."""
    out: list[bool] = []
    requeued = False
    for s in settles:
        c = s.claim
        p: dict[str, Any] = {
            "queue": c.queue,
            "id": c.job_id,
            "token": c.token,
            "now": now,
            "outcome": s.outcome.value,
            "ran_for": s.ran_for,
            "keep": s.keep,
            "error": None if s.outcome is Outcome.COMPLETE else s.error,
        }
        if s.outcome is Outcome.COMPLETE:
            sql = Q["settle_complete"]
            p["result"] = s.result
        elif s.outcome is Outcome.RETRY and s.delay > 0:
            sql = Q["settle_retry_delayed"]
            p["run_at"] = now + s.delay
        elif s.outcome is Outcome.RETRY:
            sql = Q["settle_retry_waiting"]
            p["seq"] = allocate_seq(conn, c.queue, 1)
        elif s.outcome is Outcome.RELEASE:
            sql = Q["settle_release"]
        else:  # FAIL, EXPIRE, CANCEL
            sql = Q["settle_finish"]
            p["state"] = OUTCOME_STATE[s.outcome].value
        applied = conn.execute(sql, p).rowcount == 1
        if applied:
            requeued = requeued or OUTCOME_STATE[s.outcome] not in TERMINAL
        else:
            applied = _is_repeat(conn, s)
        out.append(applied)
    return out, requeued


def _is_repeat(conn: Conn, s: Settle) -> bool:
    """A terminal transition already applied with this token (its reply was lost)."""
    target = OUTCOME_STATE[s.outcome]
    if target not in TERMINAL:
        return False
    status = conn.execute(Q["job_status"], {"queue": s.claim.queue, "id": s.claim.job_id})
    row = status.fetchone()
    return row is not None and row[0] == target.value and row[1] == s.claim.token


def wait_probe(conn: Conn, now: float, queues_json: str) -> tuple[bool, float | None]:
    ready, next_due = conn.execute(Q["wait_probe"], {"queues": queues_json}).fetchone()
    due = float(next_due) if isinstance(next_due, (int, float)) else None
    return bool(ready), due


# -- maintenance ----------------------------------------------------------------------------


def recover_stalled(
    conn: Conn, now: float, queue: str, threshold: float, max_stalled: int
) -> Recovered:
    result = Recovered(errors=quarantine_strays(conn, now, queue))
    cutoff = now - threshold
    for row in conn.execute(Q["stalled"], {"queue": queue, "cutoff": cutoff}).fetchall():
        try:
            _recover_one(conn, now, row, cutoff, max_stalled, result)
        except (sqlite3.Error, CorruptRecordError):
            if not conn.in_transaction:  # SQLite rolled the whole transaction back
                raise
            result.errors.append(str(row[1]))  # one bad job does not stop the pass
    return result


def _recover_one(
    conn: Conn,
    now: float,
    row: tuple[Any, ...],
    cutoff: float,
    max_stalled: int,
    result: Recovered,
) -> None:
    bad = records.problems(row)
    if bad:
        _fail_corrupt(conn, now, row, bad)
        result.errors.append(str(row[1]))
        return
    job = records.build(row)
    p: dict[str, Any] = {"rowid": row[records.ROWID], "token": job.token, "cutoff": cutoff}
    if job.stalls >= max_stalled:
        p.update(error=f"stalled {job.stalls + 1} times (max_stalled={max_stalled})", now=now)
        if conn.execute(Q["recover_fail"], p).rowcount == 1:
            result.failed.append(job.id)
    else:
        p.update(seq=allocate_seq(conn, job.queue, 1))
        if conn.execute(Q["recover_requeue"], p).rowcount == 1:
            result.requeued.append(job.id)


# -- events ---------------------------------------------------------------------------------


def enqueue_announced(
    conn: Conn, now: float, jobs: Sequence[NewJob], at: float, keep: int
) -> list[Enqueued]:
    """``enqueue`` and the jobs' events in one transaction: one commit, not two."""
    answers = enqueue(conn, now, jobs)
    publish(conn, now, [events.encode(events.enqueued(jobs, answers, at))], keep)
    return answers


# -- delivery store -------------------------------------------------------------------------


def claim_delivered(
    conn: Conn, now: float, queue: str, deliveries: Sequence[tuple[str, int]], worker_id: str
) -> tuple[ClaimBatch, list[str]]:
    gate = read_gate(conn, now, queue, len(deliveries))
    if gate.paused:
        return ClaimBatch([], now), []  # neither claimed nor stale: the caller offers it again
    a, budget = gate.allowance, gate.budget(now)
    claimed: list[Job] = []
    stale: list[str] = []
    held_back: float | bool | None = False  # when held back: when to try again
    for job_id, token in deliveries:
        p = {"queue": queue, "id": job_id, "token": token, "now": now, "worker_id": worker_id}
        if a is not None:
            live = conn.execute(Q["delivery_live"], p).fetchone()
            if live is None:
                stale.append(job_id)
                continue
            if len(claimed) >= a.take:
                held_back = a.retry_in  # kept by the caller
                continue
            if budget is not None and not budget.take(live[0]):
                held_back = budget.retry_in(now)
                continue
        row = conn.execute(Q["claim_delivered"], p).fetchone()
        bad = records.problems(row) if row is not None else []
        if row is None or bad:
            if bad:
                _fail_corrupt(conn, now, row, bad)
            stale.append(job_id)
        else:
            claimed.append(records.build(row))
    if gate.limits is None:
        return ClaimBatch(claimed, now), stale
    count_starts(conn, queue, gate, len(claimed), budget)
    return ClaimBatch(claimed, now, {} if held_back is False else {queue: held_back}), stale


def promote_due(conn: Conn, now: float, queue: str, limit: int) -> list[Job]:
    due = conn.execute(Q["due_delayed_page"], {"queue": queue, "now": now, "limit": limit})
    rowids = [r[0] for r in due.fetchall()]
    if not rowids:
        return []
    seq = allocate_seq(conn, queue, len(rowids))
    promoted: list[Job] = []
    for i, rowid in enumerate(rowids):
        row = conn.execute(Q["promote_returning"], {"rowid": rowid, "seq": seq + i}).fetchone()
        if row is None:
            continue
        bad = records.problems(row)
        if bad:
            _fail_corrupt(conn, now, row, bad)
        else:
            promoted.append(records.build(row))
    return promoted
