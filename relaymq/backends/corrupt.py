"""Corrupt job records: the one rule every backend follows.

RELIABILITY: "a corrupt stored record: that job is failed with a reason; the worker and
recovery go on". A job record is corrupt when a field cannot be read back, or when its state
is none of relaymq's (``state_problem``: a state nobody knows puts the job in no line, no count
and no listing, so it must be taken care of, not passed over).

The first backend operation that comes across one in a line quarantines it: claims (the
waiting line), promotion (the delayed line) and stalled recovery (the active line). Where the
lines are selected by the state stored in each record (SQLite, PostgreSQL, MongoDB), a job in
a state nobody knows is in no line: ``counts`` and each recovery pass look for such states
(the counters, or an index range, say whether there are any) and quarantine those jobs, so it
is counted where it now is. On Redis a job sits in the set of a line whatever its record says:
it is counted there until a claim, promotion or recovery meets it. Quarantine fails it into the
DLQ at once:
state ``failed``, ``finished_at`` now, ``reason(...)`` as its error, so that ``counts`` counts
it, ``list_jobs(FAILED)`` lists it with why and nothing hands it out. A listing that meets one
before that shows it with what could be read and the damage in ``extra[CORRUPT]``;
``get_jobs`` raises ``CorruptRecordError`` with the same reason.

Lua scripts and SQL statements that apply this rule name the function they mirror.
"""

from __future__ import annotations

from collections.abc import Sequence

from relaymq.job import JobState

STATES = frozenset(s.value for s in JobState)
"""The stored names of the states relaymq knows."""

CORRUPT = "corrupt"
"""The ``Job.extra`` key under which a listing tells what is wrong with a record."""


def state_problem(state: object) -> str | None:
    """What is wrong with a stored state, in words; None for a state relaymq knows."""
    if isinstance(state, bytes):
        state = state.decode(errors="replace")
    if state in STATES:
        return None
    if state is None:
        return "state is missing"
    return f"state is {state!r}, not a job state"


def reason(queue: object, job_id: object, problems: Sequence[str]) -> str:
    """The error a quarantined job keeps (and ``CorruptRecordError`` says): which job, and
    one phrase per thing wrong with it."""
    return f"corrupt record for job {job_id!r} in queue {queue!r}: {'; '.join(problems)}"
