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


def _float(d: dict[bytes, bytes], key: bytes) -> float | None:
    raw = d.get(key)
    return None if raw is None else float(raw)


def _str(d: dict[bytes, bytes], key: bytes) -> str | None:
    raw = d.get(key)
    return None if raw is None else raw.decode()


def pairs(flat: Sequence[bytes]) -> dict[bytes, bytes]:
    """HGETALL pairs as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def parse_job(queue: str, job_id: str, d: dict[bytes, bytes]) -> Job:
    """The ``Job`` for a job hash (field -> value); ``CorruptRecordError`` if unreadable."""
    try:
        return Job(
            queue=queue,
            id=job_id,
            task=d[b"task"].decode(),
            payload=d[b"payload"],
            state=JobState(d[b"state"].decode()),
            priority=int(d[b"priority"]),
            seq=int(d[b"seq"]),
            created_at=float(d[b"created_at"]),
            run_at=_float(d, b"run_at"),
            ttl=_float(d, b"ttl"),
            max_attempts=int(d.get(b"max_attempts", b"1")),
            timeout=_float(d, b"timeout"),
            attempts=int(d.get(b"attempts", b"0")),
            token=int(d.get(b"token", b"0")),
            claimed_at=_float(d, b"claimed_at"),
            heartbeat_at=_float(d, b"heartbeat_at"),
            worker_id=_str(d, b"worker_id"),
            stalls=int(d.get(b"stalls", b"0")),
            cancel_requested=d.get(b"cancel_requested") == b"1",
            progress=d.get(b"progress"),
            result=d.get(b"result"),
            error=_str(d, b"error"),
            finished_at=_float(d, b"finished_at"),
        )
    except (KeyError, ValueError, UnicodeDecodeError) as e:
        raise CorruptRecordError(f"job {job_id!r} of queue {queue!r} is unreadable: {e!r}") from e
