"""A soak worker's journal (``<ledger>/<pid>.journal``), one line per fact with its wall-clock
time, written by an observer installed on the worker's app:

- ``beat SECONDS ok|ERROR``: every heartbeat round trip (those of the fenced start check too),
  with how long it took and the error's type when it failed;
- ``call OP SECONDS ok|ERROR``: any other backend call that failed, the first to succeed after
  one failed, and one that took over a second (``wait`` excepted: it waits on purpose);
- ``lost JOB ATTEMPT``: a heartbeat or the start check found the claim lost;
- ``refused JOB ATTEMPT``: the backend refused a settle (the claim was lost);
- ``recovered JOB``: this worker's recovery pass put the job back in line;
- ``rss KIB RUNS``: the process's resident memory, every few seconds, with the runs so far.

The checker (checker.py) reads it to attribute each duplicate and to time the reconnects.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from relaymq.job import Job
from relaymq.observers import Observer
from relaymq.records.store import Recovered, Settle

SLOW = 1.0
"""Seconds after which any call is journaled."""


class Journal(Observer):
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        self._failing: set[str] = set()

    def _write(self, text: str) -> None:
        os.write(self._fd, f"{time.time():.4f} {text}\n".encode())  # one write: one line

    def call(self, op: str) -> contextlib.AbstractContextManager[object]:
        return self._timed(op)

    @contextlib.contextmanager
    def _timed(self, op: str) -> Iterator[None]:
        began = time.monotonic()
        try:
            yield
        except BaseException as e:
            took = time.monotonic() - began
            self._failing.add(op)
            self._write(
                f"{'beat' if op == 'heartbeat' else 'call ' + op} {took:.4f} {type(e).__name__}"
            )
            raise
        took = time.monotonic() - began
        if op == "heartbeat":
            self._write(f"beat {took:.4f} ok")
        elif op in self._failing or (took > SLOW and op != "wait"):
            self._write(f"call {op} {took:.4f} ok")
        self._failing.discard(op)

    def claim_lost(self, job: Job) -> None:
        self._write(f"lost {job.id} {job.attempts}")

    def settled(self, job: Job, settle: Settle, applied: bool) -> None:
        if not applied:
            self._write(f"refused {job.id} {job.attempts}")

    def recovered(self, queue: str, found: Recovered) -> None:
        for job_id in found.requeued:
            self._write(f"recovered {job_id}")

    def rss(self, runs: int) -> None:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                self._write(f"rss {line.split()[1]} {runs}")


@dataclass(frozen=True)
class Entry:
    at: float
    kind: str
    """``beat``, ``call``, ``lost``, ``refused``, ``recovered`` or ``rss``."""
    seconds: float = 0.0
    ok: bool = False
    """The backend answered (every kind but a failed call and ``rss``)."""
    job: str = ""
    detail: str = ""
    """The call's op (``call``), or the error's type; for ``rss``, the KiB and runs."""


def read(ledger: Path) -> dict[int, list[Entry]]:
    """Every worker's journal, by pid, in time order."""
    journals: dict[int, list[Entry]] = defaultdict(list)
    for path in ledger.glob("*.journal"):
        entries = journals[int(path.stem)]
        for line in path.read_text().splitlines():
            entry = _parse(line.split())
            if entry is not None:
                entries.append(entry)
        entries.sort(key=lambda e: e.at)
    return journals


def _parse(parts: list[str]) -> Entry | None:
    try:
        at, kind = float(parts[0]), parts[1]
        if kind == "beat" and len(parts) == 4:
            return Entry(at, kind, float(parts[2]), parts[3] == "ok", detail=parts[3])
        if kind == "call" and len(parts) == 5:
            return Entry(at, kind, float(parts[3]), parts[4] == "ok", detail=parts[2])
        if kind in ("lost", "refused", "recovered") and len(parts) >= 3:
            return Entry(at, kind, ok=True, job=parts[2])
        if kind == "rss" and len(parts) == 4:
            return Entry(at, kind, detail=f"{parts[2]} {parts[3]}")
    except (ValueError, IndexError):
        pass
    return None  # a line cut by a SIGKILL mid-write
