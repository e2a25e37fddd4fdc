"""Turning job hashes into ``Job`` records, and values into script arguments."""

from __future__ import annotations

from collections.abc import Sequence

from relaymq.errors import CorruptRecordError
from relaymq.job import Job, JobState


def opt(value: bytes | str | None) -> bytes:
    """An optional value as a script argument: ``b''`` for None, else ``b'=' + value``."""
    if value is None:
        return b""
    return b"=" + (value.encode() if isinstance(value, str) else value)


def num(value: float) -> str:
    """A float as a decimal string that reads back as exactly the same double."""
    return repr(float(value))


def _float(raw: bytes | None) -> float | None:
    return None if raw is None else float(raw)


def _str(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode()


def parse_job(queue: str, job_id: str, values: Sequence[bytes | None]) -> Job:
    """The ``Job`` for a job hash's values in ``JOB_FIELDS`` order (None where absent).

    Raises ``CorruptRecordError`` when the record cannot be read back.
    """
    try:
        (task, payload, state, priority, seq, created_at, run_at, ttl, max_attempts, timeout,
         attempts, token, claimed_at, heartbeat_at, worker_id, stalls, cancel_requested,
         progress, result, error, finished_at) = values  # fmt: skip
        assert task is not None and payload is not None and state is not None
        return Job(
            queue=queue,
            id=job_id,
            task=task.decode(),
            payload=payload,
            state=JobState(state.decode()),
            priority=int(priority or b""),
            seq=int(seq or b""),
            created_at=float(created_at or b""),
            run_at=_float(run_at),
            ttl=_float(ttl),
            max_attempts=int(max_attempts or b"1"),
            timeout=_float(timeout),
            attempts=int(attempts or b"0"),
            token=int(token or b"0"),
            claimed_at=_float(claimed_at),
            heartbeat_at=_float(heartbeat_at),
            worker_id=_str(worker_id),
            stalls=int(stalls or b"0"),
            cancel_requested=cancel_requested == b"1",
            progress=progress,
            result=result,
            error=_str(error),
            finished_at=_float(finished_at),
        )
    except (AssertionError, ValueError, TypeError, UnicodeDecodeError) as e:
        raise CorruptRecordError(f"job {job_id!r} of queue {queue!r} is unreadable: {e!r}") from e
