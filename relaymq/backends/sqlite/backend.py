"""SQLiteBackend: the embedded, durable default (``sqlite:///relaymq.db``).

One file on one machine, shared by any number of processes:

- WAL journal: readers never block the writer, and a commit is one append to the WAL.
- Every write is ONE ``BEGIN IMMEDIATE`` transaction: the write lock is taken first, so two
  processes never interleave inside a transition and no transaction fails half-way on a lock
  upgrade. Other writers wait up to ``busy_timeout``.
- ``synchronous=NORMAL`` (default): a commit has reached the OS when the call returns, so a
  process killed with SIGKILL loses nothing it committed; a power cut or OS crash can lose the
  last commits before the next checkpoint (the file is never corrupted).
  ``?synchronous=full`` fsyncs the WAL on every commit and survives power loss too.
- Times come from this machine's clock (one machine, one clock) or the test clock given.
- sqlite3 blocks, so all database work runs on ONE thread per backend, which owns the
  connection; the event loop only awaits it.
- Nothing wakes an idle waiter across processes, so ``wait`` and ``subscribe`` poll with a
  short adaptive interval (a few ms after activity, backing off when idle). Writes made by this
  backend instance wake its own waiters at once.

URL and options: see config.py.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sqlite3
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Concatenate, ParamSpec, TypeVar

from relaymq.backends.base import Backend, DeliveryStore
from relaymq.backends.sqlite import admin, eventlog, ops
from relaymq.backends.sqlite.config import POLL_MIN, Options, parse
from relaymq.backends.sqlite.errors import reopen_after, translate
from relaymq.backends.sqlite.ops import Q
from relaymq.backends.sqlite.tx import SQLiteWrite
from relaymq.backends.sqlite.upgrade import SCHEMA, SCHEMA_VERSION, to_incremental, upgrade
from relaymq.backends.transactional import InTransaction
from relaymq.backends.wakeup import Wakeup
from relaymq.errors import BackendError, BackendUnavailableError, ConfigError
from relaymq.job import Job, JobState, NewJob
from relaymq.records.limits import Limits
from relaymq.records.meta import MetaRecord
from relaymq.records.search import JobFilter
from relaymq.records.store import (
    Beat,
    BeatResult,
    Capabilities,
    ClaimBatch,
    Clock,
    Enqueued,
    Recovered,
    Settle,
    Tally,
    merge_tallies,
)

P = ParamSpec("P")
T = TypeVar("T")

SLOW_WRITE = 0.25
"""Seconds a write transaction may take (lock wait included) before recovery discounts it."""
LOCKED_OUT_MEMORY = 60.0
"""Seconds within which a longer slow write does not replace a longer one before it."""
MIN_SQLITE = (3, 35, 0)  # UPDATE ... RETURNING
EVENTS_POLL_MAX = 0.2
EVENTS_BATCH = 500
VACUUM_ROUNDS = 50
"""Most incremental-vacuum transactions after one ``clean`` (each gives back some pages)."""


class SQLiteBackend(Backend, DeliveryStore):
    """Durable jobs in one SQLite file, safe for many processes on one machine."""

    capabilities = Capabilities(
        durable=True,
        cross_process=True,
        server_clock=True,
        blocking_wait=False,
        delivery_store=True,
        joins_transactions=True,
        sequences=True,
        search="native",
    )

    def __init__(
        self,
        url: str = "sqlite:///relaymq.db",
        *,
        clock: Clock | None = None,
        synchronous: str = "normal",
        busy_timeout: float = 30.0,
        poll_max: float = 1.0,
        events_keep: int = 10_000,
    ) -> None:
        self.url = url
        self.options = parse(url, Options("", synchronous, busy_timeout, poll_max, events_keep))
        self.path = self.options.path
        self._clock = clock
        self._conn: sqlite3.Connection | None = None  # only touched on the database thread
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        self._wakeup = Wakeup()
        self._published = Wakeup()
        # wait()'s polling interval, kept across calls: a worker calls wait() again and again
        # while idle, and each call must not start over at a few ms. Work found resets it.
        self._poll = POLL_MIN
        self._slow_write: tuple[float, float] = (-math.inf, 0.0)
        """(monotonic end, seconds) of this handle's latest write transaction that took
        ``SLOW_WRITE`` or longer: waiting for, or holding, the database's one write lock."""

    async def connect(self) -> None:
        if self._closed:
            raise BackendError("this SQLiteBackend was closed; build a new one")
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="relaymq-sqlite")
        await self._submit(lambda conn: None)  # opens the file and applies the schema

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        executor, self._executor = self._executor, None
        if executor is None:
            return
        try:
            await asyncio.get_running_loop().run_in_executor(executor, self._disconnect)
        finally:
            executor.shutdown(wait=False)

    # -- the database thread ----------------------------------------------------------------

    def _now(self) -> float:
        return self._clock() if self._clock is not None else time.time()

    def _connection(self) -> sqlite3.Connection:
        """The open connection; opens it (and prepares the file) the first time or after an
        I/O error dropped it. Runs on the database thread."""
        if self._conn is not None:
            return self._conn
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise ConfigError(
                f"SQLiteBackend needs SQLite >= 3.35 (RETURNING); this Python has "
                f"{sqlite3.sqlite_version}"
            )
        if not self.create_missing and not os.path.exists(self.path):
            raise ConfigError(f"no SQLite database at {os.path.abspath(self.path)}")
        folder = os.path.dirname(os.path.abspath(self.path))
        if self.path != ":memory:" and not os.path.isdir(folder):
            raise ConfigError(f"no folder {folder} for the SQLite database {self.path}")
        conn = sqlite3.connect(
            self.path,
            timeout=self.options.busy_timeout,
            isolation_level=None,
            cached_statements=256,
        )
        try:
            conn.execute(Q["pragma_auto_vacuum"])  # a new file: before anything is written
            (mode,) = conn.execute(Q["pragma_wal"]).fetchone()
            if str(mode).lower() != "wal":
                raise ConfigError(f"{self.path}: SQLite refused WAL mode (got {mode!r})")
            conn.execute(Q[f"pragma_synchronous_{self.options.synchronous}"])
            conn.execute(Q["pragma_recursive_triggers"])
            (version,) = conn.execute(Q["schema_version"]).fetchone()
            if version < 1:
                conn.executescript(SCHEMA)
            if version < SCHEMA_VERSION:
                upgrade(conn)
            elif version > SCHEMA_VERSION:
                raise ConfigError(
                    f"{self.path} has relaymq schema {version}; this relaymq knows "
                    f"{SCHEMA_VERSION}: upgrade relaymq"
                )
            if self.path != ":memory:":
                to_incremental(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _guarded(self, job: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``job`` on the connection, translating sqlite3 errors. Database thread only."""
        try:
            return job(self._connection())
        except sqlite3.Error as e:
            conn = self._conn
            if conn is not None and conn.in_transaction:
                conn.rollback()
            error = translate(e, self.path)
            if reopen_after(e):
                self._disconnect()  # reopen on the next call
            raise error from e

    async def _submit(self, job: Callable[[sqlite3.Connection], T]) -> T:
        executor = self._executor
        if executor is None:
            raise BackendError("SQLiteBackend is not connected (call connect()) or was closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, self._guarded, job)

    async def _read(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, float, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """One read statement (its own snapshot)."""
        return await self._submit(lambda conn: fn(conn, self._now(), *args, **kwargs))

    async def _write(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, float, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """One ``BEGIN IMMEDIATE`` transaction; ``now`` is read once the write lock is held."""

        def transaction(conn: sqlite3.Connection) -> T:
            started = time.monotonic()
            conn.execute(Q["begin_immediate"])
            try:
                result = fn(conn, self._now(), *args, **kwargs)
                conn.commit()
            except BaseException:
                if conn.in_transaction:
                    conn.rollback()
                raise
            finally:
                self._note_slow_write(started)
            return result

        return await self._submit(transaction)

    # -- producer ---------------------------------------------------------------------------

    async def enqueue(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        if not jobs:
            return []
        answers = await self._write(ops.enqueue, jobs)
        self._wakeup.notify()
        return answers

    async def enqueue_announced(self, jobs: Sequence[NewJob], at: float) -> list[Enqueued]:
        if not jobs:
            return []
        answers = await self._write(ops.enqueue_announced, jobs, at, self.options.events_keep)
        self._wakeup.notify()
        self._published.notify()
        return answers

    def enqueue_in(
        self, connection: object, jobs: Sequence[NewJob], at: float
    ) -> InTransaction[list[Enqueued]]:
        """The enqueue on ``connection`` (``relaymq.backends.transactional``): its events are
        rows that subscribers read once the transaction commits; workers find the jobs at
        their next poll."""
        keep = self.options.events_keep
        return self._write_in(
            connection, lambda c, now: ops.enqueue_announced(c, now, jobs, at, keep)
        )

    def settle_in(
        self, connection: object, settle: Settle, events: Sequence[bytes]
    ) -> InTransaction[bool]:
        keep = self.options.events_keep

        def work(conn: sqlite3.Connection, now: float) -> bool:
            [applied], _ = ops.settle(conn, now, [settle])
            if applied and events:
                eventlog.publish(conn, now, events, keep)
            return applied

        return self._write_in(connection, work)

    def _write_in(
        self, connection: object, work: Callable[[sqlite3.Connection, float], T]
    ) -> SQLiteWrite[T]:
        return SQLiteWrite(connection, self.path, SCHEMA_VERSION, self._now, work)

    # -- worker -----------------------------------------------------------------------------

    async def claim(self, queues: Sequence[str], worker_id: str, limit: int) -> ClaimBatch:
        if not queues or limit <= 0:
            return ClaimBatch([], self._now())
        batch = await self._write(ops.claim, queues, worker_id, limit)
        if batch.jobs:
            self._poll = POLL_MIN  # busy: the next wait polls fast again
        return batch

    async def heartbeat(self, beats: Sequence[Beat]) -> list[BeatResult]:
        if not beats:
            return []
        return await self._write(ops.heartbeat, beats)

    async def settle(self, settles: Sequence[Settle]) -> list[bool]:
        if not settles:
            return []
        answers, requeued = await self._write(ops.settle, settles)
        if requeued:
            self._wakeup.notify()
        return answers

    async def wait(self, queues: Sequence[str], timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        names = json.dumps(list(queues))
        while True:
            ticket = self._wakeup.ticket()  # before the probe: a write after it still wakes us
            ready, next_due = await self._read(ops.wait_probe, names)
            now = self._now()
            if ready or (next_due is not None and next_due <= now):
                self._poll = POLL_MIN
                return
            pause = min(self._poll, deadline - loop.time())
            if next_due is not None:
                pause = min(pause, next_due - now)
            if pause <= 0:
                return
            if await self._wakeup.wait(pause, ticket):
                self._poll = POLL_MIN
                return  # this instance wrote something a waiter may want
            self._poll = min(self._poll * 2, self.options.poll_max)
            if loop.time() >= deadline:
                return  # the caller's next wait() probes first: no second probe here

    # -- maintenance ------------------------------------------------------------------------

    def _note_slow_write(self, started: float) -> None:
        ended = time.monotonic()
        seconds = ended - started
        if seconds >= SLOW_WRITE:
            last_end, last = self._slow_write
            if ended - last_end < LOCKED_OUT_MEMORY:
                seconds = max(seconds, last)
            self._slow_write = (ended, seconds)

    async def recover_stalled(self, queue: str, threshold: float, max_stalled: int) -> Recovered:
        # The database has one write lock. While a process holds it for long (one frozen in
        # the middle of a transaction), no worker can renew its claims: a claim that went stale
        # then is not stalled. How long that lasted is known here from this handle's own slow
        # writes, this pass's wait included; for ``threshold`` seconds after one, that time
        # does not count toward a stall.
        asked = time.monotonic()

        def recover(conn: sqlite3.Connection, now: float) -> Recovered:
            locked_out = time.monotonic() - asked
            ended, seconds = self._slow_write
            if time.monotonic() - ended < threshold:
                locked_out = max(locked_out, seconds)
            extra = locked_out if locked_out >= SLOW_WRITE else 0.0
            return ops.recover_stalled(conn, now, queue, threshold + extra, max_stalled)

        result = await self._write(recover)
        if result.requeued:
            self._wakeup.notify()
        return result

    # -- admin and observation --------------------------------------------------------------

    async def get_jobs(self, queue: str, ids: Sequence[str]) -> list[Job | None]:
        if not ids:
            return []
        return await self._read(admin.get_jobs, queue, ids)

    async def list_jobs(
        self,
        queue: str,
        state: JobState,
        offset: int = 0,
        limit: int = 100,
        where: JobFilter | None = None,
    ) -> list[Job]:
        return await self._read(admin.list_jobs, queue, state, offset, limit, where)

    async def sequence_head(self, queue: str, sequence: str) -> Job | None:
        return await self._read(admin.sequence_head, queue, sequence)

    async def counts(self, queue: str) -> dict[JobState, int]:
        found, strays = await self._read(admin.counts, queue)
        if strays:  # damaged jobs in no known state: quarantined, then counted as failed
            await self._write(ops.quarantine_strays, queue)
            found, _ = await self._read(admin.counts, queue)
        return found

    async def cancel_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        return await self._write(admin.cancel_jobs, queue, ids) if ids else []

    async def retry_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        if not ids:
            return []
        done = await self._write(admin.retry_jobs, queue, ids)
        if any(done):
            self._wakeup.notify()
        return done

    async def remove_jobs(self, queue: str, ids: Sequence[str]) -> list[bool]:
        return await self._write(admin.remove_jobs, queue, ids) if ids else []

    async def pause(self, queue: str) -> None:
        await self._write(admin.pause, queue)

    async def resume(self, queue: str) -> None:
        await self._write(admin.resume, queue)
        self._wakeup.notify()

    async def is_paused(self, queue: str) -> bool:
        return await self._read(admin.is_paused, queue)

    async def drain(self, queue: str) -> int:
        return await self._write(admin.drain, queue)

    async def clean(self, queue: str, state: JobState, older_than: float) -> int:
        total = 0
        while True:  # one transaction per batch: claims take turns with the purge
            n = await self._write(admin.clean, queue, state, older_than)
            total += n
            if n < admin.CLEAN_BATCH:
                break
        if total:  # the file shrinks back instead of keeping its high-water mark
            for _ in range(VACUUM_ROUNDS):
                if not await self._write(admin.give_back):
                    break
        return total

    async def obliterate(self, queue: str) -> None:
        await self._write(admin.obliterate, queue)

    async def prune_keys(self, queue: str, older_than: float) -> int:
        return await self._write(admin.prune_keys, queue, older_than)

    async def set_limits(self, queue: str, limits: Limits | None) -> None:
        await self._write(admin.set_limits, queue, limits)

    async def list_limits(self) -> dict[str, Limits]:
        return await self._read(admin.list_limits)

    async def list_queues(self) -> list[str]:
        return await self._read(admin.list_queues)

    # -- history ----------------------------------------------------------------------------

    async def add_tallies(self, tallies: Sequence[Tally]) -> None:
        merged = merge_tallies(tallies)
        if merged:
            await self._write(admin.add_tallies, merged)

    async def tallies(self, queue: str, since: int) -> list[Tally]:
        return await self._read(admin.tallies, queue, since)

    async def prune_tallies(self, before: int) -> None:
        await self._write(admin.prune_tallies, before)

    # -- meta -------------------------------------------------------------------------------

    async def meta_get(self, key: str) -> MetaRecord | None:
        return await self._read(admin.meta_get, key)

    async def meta_put(self, key: str, value: bytes, ttl: float | None = None) -> None:
        await self._write(admin.meta_put, key, value, ttl)

    async def meta_swap(
        self, key: str, expected: int | None, value: bytes, ttl: float | None = None
    ) -> bool:
        return await self._write(admin.meta_swap, key, expected, value, ttl)

    async def meta_list(self, prefix: str) -> list[MetaRecord]:
        return await self._read(admin.meta_list, prefix)

    async def meta_delete(self, key: str) -> bool:
        return await self._write(admin.meta_delete, key)

    # -- delivery store (the metadata of a broker's deliveries) -------------------------------

    async def claim_delivered(
        self, queue: str, deliveries: Sequence[tuple[str, int]], worker_id: str
    ) -> tuple[ClaimBatch, list[str]]:
        if not deliveries:
            return ClaimBatch([], self._now()), []
        return await self._write(ops.claim_delivered, queue, deliveries, worker_id)

    async def promote_due(self, queue: str, limit: int) -> list[Job]:
        return await self._write(ops.promote_due, queue, limit)

    # -- events -----------------------------------------------------------------------------

    async def publish(self, events: Sequence[bytes]) -> None:
        if not events:
            return
        await self._write(eventlog.publish, events, self.options.events_keep)
        self._published.notify()

    async def subscribe(self) -> AsyncGenerator[bytes, None]:
        last = await self._read(eventlog.events_head)  # live from here: later events are all seen

        async def events() -> AsyncGenerator[bytes, None]:
            nonlocal last
            interval = POLL_MIN
            while not self._closed:
                published = self._published.ticket()
                try:
                    batch = await self._read(eventlog.events_after, last, EVENTS_BATCH)
                except BackendUnavailableError:
                    batch = []  # busy or reopening: keep the subscription, try again
                    interval = EVENTS_POLL_MAX
                if batch:
                    for event_id, body in batch:
                        last = event_id
                        yield body
                    interval = POLL_MIN
                    continue
                if not await self._published.wait(interval, published):
                    interval = min(interval * 2, EVENTS_POLL_MAX)

        return events()
