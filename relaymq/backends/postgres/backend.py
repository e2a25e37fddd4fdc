"""PostgresBackend: one jobs table, SKIP LOCKED batch claims, LISTEN/NOTIFY wake-ups.

Every transition is one SQL statement from ``queries.sql`` (a batch of transitions is one
statement too), fenced on (queue, id, state, token). Times come from the server's ``now()``
unless a test clock is given; it is passed to every statement as a nullable epoch parameter.
Counters live in ``relaymq_counts`` (kept by statement triggers, see the first migration), so
``counts`` reads a handful of rows whatever the size of the queue. Finished jobs older than
``retention`` are removed by the workers' elected maintenance (through ``clean``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import asyncpg

from relaymq.backends.base import Backend, DeliveryStore
from relaymq.backends.corrupt import state_problem
from relaymq.backends.fanout import Fanout
from relaymq.backends.postgres.admin import PostgresAdmin
from relaymq.backends.postgres.config import Options, parse
from relaymq.backends.postgres.connection import apply_session_settings, connect_options
from relaymq.backends.postgres.enqueue import (
    NO_NOTE,
    Note,
    enqueue_steps,
    facts_fit,
    in_one_statement,
    publish_steps,
)
from relaymq.backends.postgres.errors import DRIVER_ERRORS, refused, translate
from relaymq.backends.postgres.limits import (
    LimitedQueues,
    claim_delivered_limited,
    claim_limited,
    held_back,
    settle_claim_limited,
)
from relaymq.backends.postgres.listener import Listener
from relaymq.backends.postgres.migrations import apply, migrate, migrations
from relaymq.backends.postgres.notify import Notes, decode, event_channel
from relaymq.backends.postgres.records import problems, to_job, to_job_lenient
from relaymq.backends.postgres.statements import Q
from relaymq.backends.postgres.tx import (
    PostgresWrite,
    asyncpg_runner,
    attempt_args,
    drive,
    settle_args,
    settle_steps,
)
from relaymq.backends.transactional import InTransaction
from relaymq.backends.wakeup import Wakeup
from relaymq.errors import BackendError, BackendUnavailableError, ConfigError
from relaymq.job import TERMINAL, Job, JobState, NewJob
from relaymq.records import events as events_module
from relaymq.records.search import JobFilter, search
from relaymq.records.store import (
    Beat,
    BeatResult,
    Capabilities,
    ClaimBatch,
    Clock,
    Enqueued,
    Outcome,
    Recovered,
    Settle,
    SettledClaimed,
)

PROMOTE_PER_CLAIM = 1000
"""Due delayed jobs a claim promotes to waiting per queue, beyond the ones it takes."""
RECOVER_BATCH = 1000


class PostgresBackend(PostgresAdmin, Backend, DeliveryStore):
    """PostgreSQL 13+ through asyncpg (``postgresql://`` and ``postgres://``)."""

    delivers_sequences = True

    capabilities = Capabilities(
        durable=True,
        cross_process=True,
        server_clock=True,
        blocking_wait=True,
        delivery_store=True,
        migrations=True,
        settle_claims=True,
        joins_transactions=True,
        sequences=True,
        search="native",
        coalesce_enqueues=True,
    )

    def __init__(self, url: str, *, clock: Clock | None = None, **options: Any) -> None:
        self.url = url
        self.options: Options = parse(url, options)
        self.retention = self.options.retention
        self._clock = clock
        self._pool: asyncpg.Pool | None = None
        self._connecting = asyncio.Lock()
        self._listener: Listener | None = None
        if self.options.listen_dsn is not None:  # else (a transaction pooler) wait polls
            listening = self.options.listening()
            self._listener = Listener(listening, self._wake, self._event, self._reconnected)
        # One wake-up per set of queues waited on (a worker waits on the same set every time).
        self._wakeups: dict[frozenset[str], Wakeup] = {}
        self._fanout = Fanout()
        self._inbox: asyncio.Queue[str] = asyncio.Queue()
        self._dispatcher: asyncio.Task[None] | None = None
        self._notes = Notes()
        self._limited = LimitedQueues()
        self._database: str | None = self.options.database
        """The database the jobs are in: the URL's, then the server's answer at connect."""
        self._checked: weakref.WeakSet[Any] = weakref.WeakSet()
        """Callers' connections known to reach that database and schema (``enqueue_in``)."""

    async def connect(self) -> None:
        async with self._connecting:
            if self._pool is not None:
                return
            try:
                pool = await asyncpg.create_pool(
                    self.options.dsn,
                    min_size=1,
                    max_size=self.options.pool_size,
                    command_timeout=self.options.command_timeout,
                    init=apply_session_settings if self.options.pooler == "session" else None,
                    **connect_options(self.options),
                )
            except DRIVER_ERRORS as e:
                raise refused(e, self.options.where) or translate(e, self.options.where) from e
            try:
                async with pool.acquire() as con:
                    if self.options.migrate:
                        await apply(con, self.options)
                    else:
                        await self._check_migrated(con)
                    self._database = await con.fetchval(Q["current_database"])
            except BaseException as e:
                await pool.close()
                if isinstance(e, DRIVER_ERRORS):
                    where = self.options.where
                    raise refused(e, where) or translate(e, where) from e
                raise
            self._pool = pool

    async def _check_migrated(self, con: asyncpg.Connection) -> None:
        try:
            done = {r["name"] for r in await con.fetch(Q["migrations_applied"])}
        except asyncpg.UndefinedTableError:
            done = set()
        missing = [name for name, _ in migrations() if name not in done]
        if missing:  # the deployment's configuration, not the server: exit 2 in the CLI
            raise ConfigError(
                f"schema {self.options.schema!r} lacks migrations {missing}: run "
                "`relaymq migrate` or connect with ?migrate=true"
            )

    async def close(self) -> None:
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._dispatcher
            self._dispatcher = None
        if self._listener is not None:
            await self._listener.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def migrate(self) -> list[str]:
        return await migrate(self.url)

    def _wake(self, queue: str) -> None:
        for queues, wakeup in self._wakeups.items():
            if queue in queues:
                wakeup.notify()

    def _reconnected(self) -> None:
        # Notifications sent while the LISTEN connection was down are lost: wake everyone.
        for wakeup in self._wakeups.values():
            wakeup.notify()

    # -- producer ---------------------------------------------------------------------------

    async def enqueue(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        if not jobs:
            return []
        return await self._enqueue(jobs)

    async def enqueue_announced(self, jobs: Sequence[NewJob], at: float) -> list[Enqueued]:
        """One statement, whose notification carries the enqueue's facts (``events`` makes
        them events), when they fit in one."""
        if not jobs or not facts_fit(jobs):
            return await super().enqueue_announced(jobs, at)
        return await self._enqueue(jobs, (self._channel, str(self._notes.number()), at))

    @property
    def _channel(self) -> str:
        return event_channel(self.options.schema)

    async def _enqueue(self, jobs: Sequence[NewJob], note: Note = NO_NOTE) -> list[Enqueued]:
        now = self._now()
        if in_one_statement(jobs):
            return await drive(enqueue_steps(jobs, now, note), self._step)

        async def keyed(con: asyncpg.Connection) -> list[Enqueued]:
            async with con.transaction():  # a few statements per keyed job
                return await drive(enqueue_steps(jobs, now), asyncpg_runner(con))

        return await self._in_transaction(keyed)

    async def _step(self, step: tuple[str, str, tuple[Any, ...]]) -> Any:
        kind, name, args = step
        return await self._run(kind, name, *args)

    def enqueue_in(
        self, connection: object, jobs: Sequence[NewJob], at: float
    ) -> InTransaction[list[Enqueued]]:
        """The enqueue's statements on ``connection`` (``relaymq.backends.transactional``):
        the wake-up and the events are notifications, sent by PostgreSQL at its commit."""
        now = self._now()

        def steps() -> Any:
            if facts_fit(jobs):
                note = (self._channel, str(self._notes.number()), at)
                return (yield from enqueue_steps(jobs, now, note))
            answers = yield from enqueue_steps(jobs, now)
            event = events_module.encode(events_module.enqueued(jobs, answers, at))
            yield from publish_steps(self._channel, [event], self._notes)
            return answers

        return self._write_in(connection, steps)

    def settle_in(
        self, connection: object, settle: Settle, events: Sequence[bytes]
    ) -> InTransaction[bool]:
        now = self._now()
        return self._write_in(
            connection, lambda: settle_steps(settle, now, self._channel, events, self._notes)
        )

    def _write_in(self, connection: object, steps: Any) -> PostgresWrite[Any]:
        schema, where = self.options.schema, self.options.where
        return PostgresWrite(connection, schema, self._database, steps, where, self._checked)

    # -- worker -----------------------------------------------------------------------------

    async def claim(self, queues: Sequence[str], worker_id: str, limit: int) -> ClaimBatch:
        now = self._now()
        if not queues or limit <= 0:
            return ClaimBatch([], now if now is not None else time.time())
        if self._limited.stale():
            self._limited.update([r["queue"] for r in await self._fetch("limited_queues")])
        plain, with_limits = self._limited.split(queues)
        jobs: list[Job] = []
        limited: dict[str, float | None] = {}
        if plain:
            rows = await self._fetch(
                "claim", plain, worker_id, limit, now, PROMOTE_PER_CLAIM, False
            )
            limited.update(dict.fromkeys(rows[0]["sequence_held"] or (), None))  # start as jobs end
            jobs = await self._readable([r for r in rows if r["id"] is not None], now)
        for queue in with_limits:
            want = limit - len(jobs)
            if want <= 0:
                break
            rows, a, keys_held = await self._in_transaction(
                claim_limited, queue, worker_id, want, now, PROMOTE_PER_CLAIM
            )
            jobs += await self._readable(rows, now)
            limited.update(held_back(queue, len(rows), want, a, keys_held))
        return _batch(jobs, now, limited)

    async def heartbeat(self, beats: Sequence[Beat]) -> list[BeatResult]:
        if not beats:
            return []
        rows = await self._fetch(
            "heartbeat",
            [b.claim.queue for b in beats],
            [b.claim.job_id for b in beats],
            [b.claim.token for b in beats],
            [b.progress for b in beats],
            self._now(),
        )
        return [BeatResult(r["held"], r["cancel_requested"]) for r in rows]

    async def settle(self, settles: Sequence[Settle]) -> list[bool]:
        if not settles:
            return []
        rows = await self._fetch(
            "settle", *settle_args(settles), self._now(), *attempt_args(settles)
        )
        return [bool(r["applied"]) for r in rows]

    async def settle_and_claim(
        self, settles: Sequence[Settle], queues: Sequence[str], worker_id: str, limit: int
    ) -> SettledClaimed:
        """One statement, one commit, for queues without limits; for one queue with limits,
        the settles go with the claim's last statement (``settle_claim_limited``), one commit
        too. A settle that puts a job back in line makes the two calls: the claim must see
        that job (I10), and the claim part of one statement cannot (``settle_claim`` in
        queries.sql); so do several queues with limits, or some with and some without."""
        if not settles or not queues or limit <= 0 or _back_in_line(settles):
            return await super().settle_and_claim(settles, queues, worker_id, limit)
        if self._limited.stale():
            self._limited.update([r["queue"] for r in await self._fetch("limited_queues")])
        plain, with_limits = self._limited.split(queues)
        if with_limits and not plain and len(with_limits) == 1:
            return await self._settle_claim_limited(settles, with_limits[0], worker_id, limit)
        if with_limits:
            return await super().settle_and_claim(settles, queues, worker_id, limit)
        now = self._now()
        rows = await self._fetch(
            "settle_claim",
            *settle_args(settles),
            now,
            *attempt_args(settles),
            plain,
            worker_id,
            limit,
            PROMOTE_PER_CLAIM,
        )
        jobs = await self._readable([r for r in rows if r["id"] is not None], now)
        limited: dict[str, float | None] = dict.fromkeys(rows[0]["sequence_held"] or ())
        return SettledClaimed(list(rows[0]["applied"]), _batch(jobs, now, limited))

    async def _settle_claim_limited(
        self, settles: Sequence[Settle], queue: str, worker_id: str, limit: int
    ) -> SettledClaimed:
        now = self._now()
        applied, (rows, a, keys_held) = await self._in_transaction(
            settle_claim_limited, settles, queue, worker_id, limit, now, PROMOTE_PER_CLAIM
        )
        limited = held_back(queue, len(rows), limit, a, keys_held)
        return SettledClaimed(applied, _batch(await self._readable(rows, now), now, limited))

    async def wait(self, queues: Sequence[str], timeout: float) -> None:
        if self._listener is None:  # no LISTEN through a transaction pooler: poll
            timeout = min(timeout, self.options.poll_interval)
        elif not await self._listener.ready(within=min(timeout, 5.0)):  # starts it
            timeout = min(timeout, 1.0)  # no wake-ups while it reconnects: poll gently
        key = frozenset(queues)
        wakeup = self._wakeups.get(key)
        if wakeup is None:
            wakeup = self._wakeups[key] = Wakeup()
        ticket = wakeup.ticket()  # before the check: a wake-up sent after it is kept
        row = await self._fetchrow("wait_check", list(queues), self._now())
        if row["ready"]:
            return
        if row["next_due"] is not None:
            timeout = min(timeout, max(0.0, row["next_due"]))
        await wakeup.wait(timeout, ticket)

    # -- maintenance ------------------------------------------------------------------------

    async def recover_stalled(self, queue: str, threshold: float, max_stalled: int) -> Recovered:
        _, strays = await self._counts(queue)
        result = Recovered(errors=await self._quarantine_strays(queue, strays))
        while True:
            rows = await self._fetch(
                "recover_stalled",
                queue,
                float(threshold),
                max_stalled,
                self._now(),
                RECOVER_BATCH,
            )
            for r in rows:
                (result.failed if r["state"] == JobState.FAILED else result.requeued).append(
                    r["id"]
                )
            if len(rows) < RECOVER_BATCH:
                break
        if result.requeued:  # SQL requeued them; one that cannot be read is failed instead
            found = await self._fetch("get_jobs", queue, result.requeued)
            bad = [(r, wrong) for r in found if (wrong := problems(r))]
            failed = set(await self._quarantine(bad, self._now())) if bad else set()
            result.requeued[:] = [i for i in result.requeued if i not in failed]
            result.errors.extend(failed)
        return result

    # -- admin and observation --------------------------------------------------------------

    async def get_jobs(self, queue: str, ids: Sequence[str]) -> list[Job | None]:
        if not ids:
            return []
        found = {r["id"]: to_job(r) for r in await self._fetch("get_jobs", queue, list(ids))}
        return [found.get(i) for i in ids]

    async def list_jobs(
        self,
        queue: str,
        state: JobState,
        offset: int = 0,
        limit: int = 100,
        where: JobFilter | None = None,
    ) -> list[Job]:
        if where is not None:
            rows = await self._fetch(
                "search_jobs", queue, state.value, offset, limit, *search(where)
            )
        elif state in TERMINAL:
            rows = await self._fetch("list_finished", queue, state.value, offset, limit)
        else:
            rows = await self._fetch(f"list_{state.value}", queue, offset, limit)
        return [to_job_lenient(r, state) for r in rows]

    async def counts(self, queue: str) -> dict[JobState, int]:
        out, strays = await self._counts(queue)
        if strays:  # damaged jobs in no known state: quarantined, then counted as failed
            await self._quarantine_strays(queue, strays)
            out, _ = await self._counts(queue)
        return out

    async def _counts(self, queue: str) -> tuple[dict[JobState, int], list[str]]:
        """Jobs per state, and the states nobody knows that hold jobs of ``queue``."""
        out = {s: 0 for s in JobState}
        strays: list[str] = []
        for r in await self._fetch("counts", queue):
            if state_problem(r["state"]) is None:
                out[JobState(r["state"])] = int(r["n"])
            elif r["n"] > 0:
                strays.append(r["state"])
        return out, strays

    # -- events -----------------------------------------------------------------------------

    async def publish(self, events: Sequence[bytes]) -> None:
        if not events:
            return
        pool = self._pool
        if pool is None:
            raise BackendError("PostgresBackend is not connected (await connect() first)")
        steps = publish_steps(self._channel, events, self._notes)
        try:
            async with pool.acquire() as con:
                if not any(self._notes.too_large(e) for e in events):  # one statement
                    await drive(steps, asyncpg_runner(con))
                    return
                async with con.transaction():  # events stored, then sent: one transaction
                    await drive(steps, asyncpg_runner(con))
        except DRIVER_ERRORS as e:
            raise translate(e, self.options.where) from e

    async def subscribe(self) -> AsyncGenerator[bytes, None]:
        if self._listener is None:
            raise ConfigError(
                "events need a LISTEN connection, which a pooler in transaction mode cannot "
                "keep: add listen_url=<a postgresql:// URL straight to the server> to the "
                f"backend URL ({self.options.where} is a transaction pooler)"
            )
        if not await self._listener.ready(within=10.0):  # starts it
            raise BackendUnavailableError("PostgreSQL LISTEN connection is not up")
        try:
            await self._listener.listen_events()
        except DRIVER_ERRORS as e:
            raise BackendUnavailableError(f"PostgreSQL LISTEN failed: {e}") from e
        if self._dispatcher is None:
            self._dispatcher = asyncio.create_task(self._dispatch(), name="relaymq-events")
        return self._fanout.subscribe()

    def _event(self, payload: str) -> None:
        self._inbox.put_nowait(payload)

    async def _dispatch(self) -> None:
        """Decode notifications in arrival order (fetching stored ones) and fan them out."""
        while True:
            body, stored_id = decode(await self._inbox.get())
            if stored_id is not None:
                try:
                    row = await self._fetchrow("fetch_event", stored_id)
                except BackendError:
                    row = None
                body = bytes(row["body"]) if row is not None else None
            if body is None:
                continue
            self._fanout.deliver([body])

    # -- delivery store (the metadata of a broker's deliveries) -------------------------------

    async def claim_delivered(
        self, queue: str, deliveries: Sequence[tuple[str, int]], worker_id: str
    ) -> tuple[ClaimBatch, list[str]]:
        now = self._now()
        rows: list[asyncpg.Record] = []
        limited: dict[str, float | None] = {}
        if deliveries:
            rows, _, held = await self._in_transaction(
                claim_delivered_limited, queue, deliveries, worker_id, now
            )
            if held is not False:  # its limits or its sequences held deliveries back
                limited[queue] = held
        jobs = await self._readable([r for r in rows if r["id"] is not None], now)
        stale = [r["delivery_id"] for r in rows if r["id"] is None and not r["sequence_held"]]
        return _batch(jobs, now, limited), stale

    async def promote_due(self, queue: str, limit: int) -> list[Job]:
        if limit <= 0:
            return []
        now = self._now()
        return await self._readable(await self._fetch("promote_due", queue, limit, now), now)


def _batch(jobs: list[Job], now: float | None, limited: dict[str, float | None]) -> ClaimBatch:
    """A claim's batch, at ``now`` or (on the server's clock) at its jobs' claim time."""
    if now is None:
        now = jobs[0].claimed_at if jobs and jobs[0].claimed_at else time.time()
    return ClaimBatch(jobs, now, limited)


def _back_in_line(settles: Sequence[Settle]) -> bool:
    """Whether a settle may return its job to waiting at once (a release, a retry without
    delay): the one statement of ``settle_claim`` would claim past it."""
    return any(
        s.outcome is Outcome.RELEASE or (s.outcome is Outcome.RETRY and s.delay <= 0)
        for s in settles
    )
