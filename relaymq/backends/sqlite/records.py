"""Reading job rows back: every field is checked, because the file is not trusted.

SQLite columns are loosely typed, so a row damaged by a tool, a bug or a bad migration can hold
text where a number belongs or a state nobody knows. ``to_job`` refuses such a row with
``CorruptRecordError`` naming the field; ``to_job_lenient`` (listings for operators) substitutes
a neutral value and says what was wrong in ``Job.extra["corrupt"]``.
"""

from __future__ import annotations

import json
from typing import Any

from relaymq.backends.corrupt import reason, state_problem
from relaymq.backends.sqlfile import fragments
from relaymq.errors import CorruptRecordError
from relaymq.job import DependencyPolicy, Job, JobState, SequenceFailure, attempts_from

COLUMNS = tuple(c.strip() for c in fragments(__package__, "queries.sql")["job"].split(","))
"""The job columns in the order of "<job>" in queries.sql, where they are written once."""
ROWID = COLUMNS.index("rowid")
HISTORY = COLUMNS.index("attempt_history")
DEPENDS_ON = COLUMNS.index("depends_on")
DEP_POLICY = COLUMNS.index("dep_policy")
PRIORITY = COLUMNS.index("priority")
SEQ = COLUMNS.index("seq")
SEQ_FAILURE = COLUMNS.index("seq_failure")

_STATES = {s.value: s for s in JobState}
_POLICIES = {p.value: p for p in DependencyPolicy}
_SEQ_FAILURES = {p.value: p for p in SequenceFailure}

# What each column may hold: (python types allowed, nullable, neutral value for listings).
_KINDS: dict[str, tuple[tuple[type, ...], bool, Any]] = {
    "queue": ((str,), False, ""),
    "id": ((str,), False, ""),
    "task": ((str,), False, ""),
    "payload": ((bytes,), False, b""),
    "priority": ((int,), False, 0),
    "seq": ((int,), False, 0),
    "created_at": ((float, int), False, 0.0),
    "run_at": ((float, int), True, None),
    "ttl": ((float, int), True, None),
    "max_attempts": ((int,), False, 1),
    "timeout": ((float, int), True, None),
    "attempts": ((int,), False, 0),
    "token": ((int,), False, -1),
    "claimed_at": ((float, int), True, None),
    "heartbeat_at": ((float, int), True, None),
    "worker_id": ((str,), True, None),
    "stalls": ((int,), False, 0),
    "cancel_requested": ((int,), False, 0),
    "progress": ((bytes,), True, None),
    "result": ((bytes,), True, None),
    "error": ((str,), True, None),
    "finished_at": ((float, int), True, None),
    "traceparent": ((str,), True, None),
    "depends_on": ((str,), True, None),
    "dep_policy": ((str,), True, None),
    "limit_key": ((str,), True, None),
    "sequence": ((str,), True, None),
    "seq_failure": ((str,), True, None),
}
_FLOATS = frozenset(name for name, (types, _, _) in _KINDS.items() if float in types)
_CHECKS = tuple(
    (i, name, *_KINDS[name]) for i, name in enumerate(COLUMNS[:ROWID]) if name in _KINDS
)


def problems(row: tuple[Any, ...]) -> list[str]:
    """What is wrong with ``row``, one phrase per bad field; empty for a sound row."""
    found: list[str] = []
    if (wrong := state_problem(row[4])) is not None:
        found.append(wrong)
    for i, name, types, nullable, _ in _CHECKS:
        value = row[i]
        if type(value) not in types and not (value is None and nullable):
            found.append(f"{name} is {value!r}, not {'/'.join(t.__name__ for t in types)}")
    if isinstance(row[DEPENDS_ON], str) and _dependencies(row[DEPENDS_ON]) is None:
        found.append(f"depends_on is {row[DEPENDS_ON]!r}, not a JSON array of job ids")
    if isinstance(row[DEP_POLICY], str) and row[DEP_POLICY] not in _POLICIES:
        found.append(f"dep_policy is {row[DEP_POLICY]!r}, not a dependency policy")
    if isinstance(row[SEQ_FAILURE], str) and row[SEQ_FAILURE] not in _SEQ_FAILURES:
        found.append(f"seq_failure is {row[SEQ_FAILURE]!r}, not 'hold' or 'continue'")
    return found


def _dependencies(text: str) -> tuple[str, ...] | None:
    try:
        ids = json.loads(text)
    except ValueError:
        return None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return None
    return tuple(ids)


def to_job(row: tuple[Any, ...]) -> Job:
    """The ``Job`` stored in ``row``; ``CorruptRecordError`` when any field is unreadable."""
    bad = problems(row)
    if bad:
        raise CorruptRecordError(describe(row, bad))
    return build(row)


def to_job_lenient(row: tuple[Any, ...], state: JobState) -> Job:
    """Like ``to_job``, but a bad field gets a neutral value and the damage goes into ``extra``.

    Only for listings shown to operators (the row was selected by ``state``); never for claims.
    """
    bad = problems(row)
    if not bad:
        return build(row)
    fixed = list(row)
    fixed[4] = state.value
    for i, _, types, nullable, neutral in _CHECKS:
        if type(row[i]) not in types and not (row[i] is None and nullable):
            fixed[i] = neutral
    if isinstance(fixed[DEPENDS_ON], str) and _dependencies(fixed[DEPENDS_ON]) is None:
        fixed[DEPENDS_ON] = None
    if fixed[DEP_POLICY] not in _POLICIES:
        fixed[DEP_POLICY] = None
    if fixed[SEQ_FAILURE] not in _SEQ_FAILURES:
        fixed[SEQ_FAILURE] = None
    return build(tuple(fixed), {"corrupt": "; ".join(bad)})


def describe(row: tuple[Any, ...], bad: list[str]) -> str:
    """The reason stored with (and raised for) an unreadable job."""
    return reason(row[0], row[1], bad)


def build(row: tuple[Any, ...], extra: dict[str, str] | None = None) -> Job:
    """The ``Job`` of a row that ``problems`` found sound."""
    v = {name: row[i] for i, name in enumerate(COLUMNS[:ROWID])}
    for name in _FLOATS:
        if v[name] is not None:
            v[name] = float(v[name])
    v["state"] = _STATES[v["state"]]
    v["cancel_requested"] = bool(v["cancel_requested"])
    deps, policy = v.pop("depends_on"), v.pop("dep_policy")
    seq_failure = v.pop("seq_failure")
    if seq_failure is not None:
        v["sequence_on_failure"] = _SEQ_FAILURES[seq_failure]
    if deps is not None:
        v["depends_on"] = _dependencies(deps)
    if policy is not None:
        v["on_dependency_failure"] = _POLICIES[policy]
    history = row[HISTORY]
    if history is not None:
        v["attempt_history"] = attempts_from(history if isinstance(history, str | bytes) else None)
    return Job(**v, extra=extra or {})
