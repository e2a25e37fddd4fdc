"""RedisBackend: one Lua script per transition over the key layout of ``keys.py``.

Every transition is one EVALSHA (``scripts/*.lua``, each with a header of its KEYS, ARGV and
replies); a batch of one queue is one script call and batches of several queues go out in one
pipeline. Times come from Redis ``TIME`` inside the scripts unless a test clock is given, whose
reading is then passed as the first argument. Idle workers block in BLPOP on the queues' wake-up
lists, which enqueue, retry, release, resume, promotion and recovery push to.

The client is redis-py's asyncio ``Redis`` (``redis://``, ``rediss://``) or ``RedisCluster``
(``redis+cluster://``). redis-py re-opens broken connections on the next command, so after a
server restart the next call works; the script cache the restart emptied is refilled on the
first NOSCRIPT reply; the event subscription re-subscribes by itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from relaymq.backends.base import Backend, DeliveryStore
from relaymq.backends.redis import pubsub
from relaymq.backends.redis.admin import RedisAdmin
from relaymq.backends.redis.config import parse_url
from relaymq.backends.redis.errors import translate, wrong_type
from relaymq.backends.redis.keys import JOB_FIELDS, STATE_SUFFIXES, Keys, per_queue
from relaymq.backends.redis.listing import listed_jobs
from relaymq.backends.redis.metastore import RedisMeta
from relaymq.backends.redis.parts import (
    CLAIM_CHUNK,
    ENQUEUE_CHUNK,
    PROMOTE_MAX,
    SCAN_CHUNK,
    SETTLE_CHUNK,
)
from relaymq.backends.redis.records import (
    Unreadable,
    claimed_jobs,
    delivered_jobs,
    deps_arg,
    enqueue_head,
    held_back,
    num,
    opt,
    parse_job,
    promoted_jobs,
    rule_arg,
    sequence_arg,
)
from relaymq.backends.redis.transport import Transport
from relaymq.backends.redis.upgrade import carry_schedules
from relaymq.errors import BackendError, BackendUnavailableError, ConfigError, CorruptRecordError
from relaymq.job import Job, JobState, NewJob
from relaymq.records.search import JobFilter
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
    dependent,
    keyed,
)


class RedisBackend(RedisAdmin, RedisMeta, Backend, DeliveryStore):
    """Redis and Redis Cluster backend (``redis://``, ``rediss://``, ``redis+cluster://``).

    Options: ``prefix`` (also ``?prefix=`` in the URL; default ``relaymq``) namespaces every
    key; other keyword options go to the redis-py client. Durable when the server persists
    (``appendonly yes``, ``appendfsync always`` for no loss on a crash); a server whose
    ``maxmemory-policy`` is not ``noeviction`` gets an ``EvictionPolicyWarning`` at connect.
    """

    delivers_sequences = True

    capabilities = Capabilities(
        durable=True,
        cross_process=True,
        server_clock=True,
        blocking_wait=True,
        cluster_safe=True,
        delivery_store=True,
        coalesce_enqueues=True,
        sequences=True,
    )

    def __init__(
        self, url: str, *, clock: Clock | None = None, prefix: str | None = None, **options: Any
    ) -> None:
        self.url = url
        self._options = parse_url(url, prefix)
        self._keys = Keys(self._options.prefix)
        self._clock = clock
        if not self._options.cluster:  # one pipeline: a cluster routes each queue on its own
            self.capabilities = dataclasses.replace(self.capabilities, settle_claims=True)
        self._t = Transport(self._options, options)
        self._run = self._t.run
        self._script = self._t.script
        self._evalsha = self._t.evalsha

    async def connect(self) -> None:
        await self._t.open()
        if self._t.durable is False:  # appendonly no: this server keeps nothing on a restart
            self.capabilities = dataclasses.replace(self.capabilities, durable=False)
        await carry_schedules(self._t, self._keys.prefix, lambda k, v: self.meta_swap(k, None, v))

    async def close(self) -> None:
        await self._t.close()

    # -- internal ---------------------------------------------------------------------------

    async def _fail_unreadable(self, unreadable: list[Unreadable]) -> None:
        """Claimed jobs whose records cannot be read here go to the DLQ with the reason, rather
        than be handed out or dropped."""
        await self.settle([Settle(c, Outcome.FAIL, error=why) for c, why in unreadable])

    # -- producer ---------------------------------------------------------------------------

    async def enqueue(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        return await self._enqueue(jobs, "", 0.0)

    async def enqueue_announced(self, jobs: Sequence[NewJob], at: float) -> list[Enqueued]:
        """One round trip: each script call publishes the facts of its jobs' enqueue, which
        ``events`` makes events (two for a batch with dependencies, whose events say more
        than the script knows)."""
        if dependent(jobs):
            return await super().enqueue_announced(jobs, at)
        # Events nobody hears are not encoded: the script asks whether anyone subscribes,
        # which only a single server can answer (a cluster's subscribers may be elsewhere).
        channel = self._keys.events if self._options.cluster else "?" + self._keys.events
        return await self._enqueue(jobs, channel, at)

    async def _enqueue(self, jobs: Sequence[NewJob], channel: str, at: float) -> list[Enqueued]:
        by_queue: dict[str, list[int]] = {}
        heads: dict[tuple[Any, ...], str] = {}  # the options part of a head, per distinct set
        head_of: list[str] = []
        for i, new in enumerate(jobs):
            options = (
                new.priority,
                new.delay,
                new.ttl,
                new.max_attempts,
                new.timeout,
                new.traceparent,
                new.limit_key,
            )
            prefix = heads.get(options)
            if prefix is None:
                prefix = heads[options] = enqueue_head(new)
            head_of.append(prefix + new.id)
            indexes = by_queue.get(new.queue)
            if indexes is None:
                self._keys.base(new.queue)  # validates the name before anything is written
                indexes = by_queue[new.queue] = []
            indexes.append(i)
        now = self._now()
        with_seqs = any(j.sequence is not None for j in jobs)  # then a 6th argument
        with_deps = with_seqs or dependent(jobs)  # then each job has a 5th (enqueue.lua)
        with_rules = with_deps or keyed(jobs)  # then a 4th argument and 2 answers
        commands: list[tuple[Any, ...]] = []
        chunks: list[list[int]] = []
        for queue, indexes in by_queue.items():
            commands.append(("SADD", self._keys.queues, queue))
            chunks.append([])
            head = self._evalsha(
                "enqueue",
                [self._keys.base(queue)],
                [
                    now,
                    channel,
                    queue,
                    at,
                    6 if with_seqs else 5 if with_deps else 4 if with_rules else 3,
                ],
            )
            for start in range(0, len(indexes), ENQUEUE_CHUNK):
                chunk = indexes[start : start + ENQUEUE_CHUNK]
                args: list[Any] = []
                for i in chunk:
                    j = jobs[i]
                    args += (head_of[i], j.task, j.payload)
                    if with_rules:
                        args.append(rule_arg(j))
                    if with_deps:
                        args.append(deps_arg(j))
                    if with_seqs:
                        args.append(sequence_arg(j))
                commands.append((*head, *args))
                chunks.append(chunk)
        wait = self._options.wait_replicas
        if wait:  # on the same connection, after the writes: they reach that many replicas
            commands.append(("WAIT", wait, round(self._options.wait_timeout * 1000)))
            chunks.append([])
        replies = await self._run(commands, "enqueue")
        if wait and int(replies[-1]) < wait:
            raise BackendUnavailableError(
                f"Redis stored the enqueue on its primary but only {int(replies[-1])} of "
                f"wait_replicas={wait} replicas had it after {self._options.wait_timeout:g}s: "
                "a failover now could lose it; enqueue it again (with its job ids, a repeat is "
                "answered as a duplicate)"
            )
        out: list[Enqueued | None] = [None] * len(jobs)
        for chunk, reply in zip(chunks, replies, strict=True):
            if not chunk:
                continue  # the SADD to the queue list
            if not with_rules:
                for i, stored in zip(chunk, reply, strict=True):
                    out[i] = Enqueued(jobs[i].id, duplicate=not stored)
                continue
            for n, i in enumerate(chunk):
                stored, other = reply[2 * n], reply[2 * n + 1].decode()
                if stored:
                    out[i] = Enqueued(jobs[i].id, replaced=other or None)
                else:
                    out[i] = Enqueued(other or jobs[i].id, duplicate=True)
        return [e for e in out if e is not None]

    # -- worker -----------------------------------------------------------------------------

    async def claim(self, queues: Sequence[str], worker_id: str, limit: int) -> ClaimBatch:
        if not queues:
            return ClaimBatch([], self._clock() if self._clock else time.time())
        # A cluster claim visits queue by queue (each lives in its own slot); otherwise one
        # script call takes the whole batch across every queue.
        visits = [[q] for q in queues] if self._options.cluster else [list(queues)]
        jobs: list[Job] = []
        limited: dict[str, float | None] = {}
        now = 0.0
        for visit in visits:
            keys = [self._keys.base(q) for q in visit]
            while True:
                want = min(limit - len(jobs), CLAIM_CHUNK)
                reply = await self._script(
                    "claim", keys, [self._now(), worker_id, max(want, 0), PROMOTE_MAX]
                )
                now = float(reply[0])
                limited |= held_back(visit, reply[1])
                got, unreadable = claimed_jobs(visit, reply, worker_id)
                if unreadable:
                    await self._fail_unreadable(unreadable)
                jobs += got
                if want < CLAIM_CHUNK or len(got) < want:
                    break
            if len(jobs) >= limit:
                break
        return ClaimBatch(jobs, now, limited)

    async def heartbeat(self, beats: Sequence[Beat]) -> list[BeatResult]:
        now = self._now()
        commands = []
        order: list[list[int]] = []
        for queue, indexes in per_queue([b.claim for b in beats], SETTLE_CHUNK):
            order.append(indexes)
            args: list[Any] = [now]
            for i in indexes:
                c = beats[i].claim
                args += (b"%d %s" % (c.token, c.job_id.encode()), opt(beats[i].progress))
            commands.append(self._evalsha("heartbeat", [self._keys.base(queue)], args))
        replies = await self._run(commands, "heartbeat") if commands else []
        out = [BeatResult(held=False)] * len(beats)
        for indexes, reply in zip(order, replies, strict=True):
            for i, code in zip(indexes, reply, strict=True):
                out[i] = BeatResult(held=code == 1, cancel_requested=code == 2)
        return out

    async def settle(self, settles: Sequence[Settle]) -> list[bool]:
        commands, order = self._settle_commands(settles)
        return _settled(
            len(settles), order, await self._run(commands, "settle") if commands else []
        )

    def _settle_commands(
        self, settles: Sequence[Settle]
    ) -> tuple[list[tuple[Any, ...]], list[list[int]]]:
        """One settle script call per queue (and chunk), and the settles each answers for."""
        now = self._now()
        commands = []
        order: list[list[int]] = []
        for queue, indexes in per_queue([s.claim for s in settles], SETTLE_CHUNK):
            order.append(indexes)
            args: list[Any] = [now]
            for i in indexes:
                s = settles[i]
                c = s.claim
                ran_for = "-" if s.ran_for is None else repr(float(s.ran_for))
                head = f"{c.token} {s.outcome.value} {s.delay!r} {ran_for} {s.keep} {c.job_id}"
                args += (head, opt(s.result if s.outcome is Outcome.COMPLETE else s.error))
            commands.append(self._evalsha("settle", [self._keys.base(queue)], args))
        return commands, order

    async def settle_and_claim(
        self, settles: Sequence[Settle], queues: Sequence[str], worker_id: str, limit: int
    ) -> SettledClaimed:
        """The settle scripts and one claim script, pipelined in one round trip (a cluster, or
        a claim larger than one script call, makes the two calls)."""
        if self._options.cluster or not queues or not 0 < limit <= CLAIM_CHUNK:
            return await super().settle_and_claim(settles, queues, worker_id, limit)
        commands, order = self._settle_commands(settles)
        keys = [self._keys.base(q) for q in queues]
        commands.append(self._evalsha("claim", keys, [self._now(), worker_id, limit, PROMOTE_MAX]))
        *settle_replies, claim_reply = await self._t.run_all(commands, "settle")
        batch: ClaimBatch | None = None
        claim_error: Exception | None = None
        if isinstance(claim_reply, Exception):
            claim_error = translate(claim_reply, "claim") or claim_reply
        else:
            got, unreadable = claimed_jobs(queues, claim_reply, worker_id)
            if unreadable:
                await self._fail_unreadable(unreadable)
            batch = ClaimBatch(got, float(claim_reply[0]), held_back(queues, claim_reply[1]))
        failed = next((r for r in settle_replies if isinstance(r, Exception)), None)
        if failed is not None:
            if batch is not None and batch.jobs:  # hold nothing: the caller retries the settle
                with contextlib.suppress(BackendError):  # else recovered as stalled
                    await self.settle([Settle(j.claim, Outcome.RELEASE) for j in batch.jobs])
            raise (translate(failed, "settle") or failed) from failed
        return SettledClaimed(_settled(len(settles), order, settle_replies), batch, claim_error)

    async def wait(self, queues: Sequence[str], timeout: float) -> None:
        if not queues or timeout <= 0:
            return
        groups = self._keys.by_slot(queues) if self._options.cluster else [list(queues)]
        now = self._now()
        checks = [
            self._evalsha("wait_check", [self._keys.base(q) for q in g], [now]) for g in groups
        ]
        block = timeout
        for answer in await self._run(checks, "wait"):
            if answer == b"ready":
                return
            if answer != b"idle":
                block = min(block, float(answer))
        # Paused queues are watched too: resume pushes wake-up tokens.
        await self._t.block([[self._keys.wake(q) for q in g] for g in groups], block)

    # -- maintenance ------------------------------------------------------------------------

    async def recover_stalled(self, queue: str, threshold: float, max_stalled: int) -> Recovered:
        result = Recovered()
        base = self._keys.base(queue)
        while True:
            requeued, failed, unreadable, examined = await self._script(
                "recover", [base], [self._now(), num(threshold), max_stalled, SCAN_CHUNK]
            )
            result.requeued.extend(i.decode() for i in requeued)
            result.failed.extend(i.decode() for i in failed)
            result.errors.extend(i.decode() for i in unreadable)
            if examined < SCAN_CHUNK:
                return result

    # -- admin and observation --------------------------------------------------------------

    async def get_jobs(self, queue: str, ids: Sequence[str]) -> list[Job | None]:
        if not ids:
            return []
        try:  # one pipeline: one round trip (a queue's keys share one slot on a cluster)
            replies = await self._run(
                [("HMGET", self._keys.job(queue, i), *JOB_FIELDS) for i in ids], "get_jobs"
            )
        except BackendError as e:
            if wrong_type(e):
                which = f"job {ids[0]!r}" if len(ids) == 1 else "a job"
                raise CorruptRecordError(f"{which} of {queue!r} is not a hash") from e
            raise
        return [
            None if all(v is None for v in values) else parse_job(queue, i, values)
            for i, values in zip(ids, replies, strict=True)
        ]

    async def sequence_head(self, queue: str, sequence: str) -> Job | None:
        """The first of the sequence's set (enqueue order): only jobs holding their place
        are in it (keys.py)."""
        [ids] = await self._run(
            [("ZRANGE", self._keys.sequence(queue, sequence), 0, 0)], "sequence_head"
        )
        if not ids:
            return None
        [job] = await self.get_jobs(queue, [ids[0].decode()])
        return job

    async def list_jobs(
        self,
        queue: str,
        state: JobState,
        offset: int = 0,
        limit: int = 100,
        where: JobFilter | None = None,
    ) -> list[Job]:
        if where is not None:  # capabilities.search is "scan": the caller reads pages
            raise ConfigError("Redis has no query to search jobs with: read pages instead")
        if limit <= 0:
            return []
        reply = await self._script(
            "page", [self._keys.base(queue)], [state.value, max(offset, 0), limit]
        )
        return listed_jobs(queue, state, reply)

    async def counts(self, queue: str) -> dict[JobState, int]:
        replies = await self._run(
            [("ZCARD", self._keys.state(queue, s)) for s in STATE_SUFFIXES], "counts"
        )
        return {JobState(s): int(n) for s, n in zip(STATE_SUFFIXES, replies, strict=True)}

    # -- events -----------------------------------------------------------------------------

    async def publish(self, events: Sequence[bytes]) -> None:
        if events:
            await self._run([("PUBLISH", self._keys.events, pubsub.frame(events))], "publish")

    async def subscribe(self) -> AsyncGenerator[bytes, None]:
        return await pubsub.subscribe(self._t.client, self._keys.events)

    # -- delivery store ---------------------------------------------------------------------

    async def claim_delivered(
        self, queue: str, deliveries: Sequence[tuple[str, int]], worker_id: str
    ) -> tuple[ClaimBatch, list[str]]:
        args = [self._now(), worker_id, *(f"{token} {job_id}" for job_id, token in deliveries)]
        nows, paused, claimed, stale, retry = await self._script(
            "claim_delivered", [self._keys.base(queue)], args
        )
        if paused:
            return ClaimBatch([], float(nows)), []
        jobs, unreadable = delivered_jobs(queue, claimed)
        if unreadable:
            await self._fail_unreadable(unreadable)
        limited = held_back([queue], [1, retry]) if retry is not None else {}
        return ClaimBatch(jobs, float(nows), limited), [i.decode() for i in stale]

    async def promote_due(self, queue: str, limit: int) -> list[Job]:
        if limit <= 0:
            return []
        reply = await self._script("promote_due", [self._keys.base(queue)], [self._now(), limit])
        return promoted_jobs(queue, reply)


def _settled(n: int, order: list[list[int]], replies: Sequence[Any]) -> list[bool]:
    """The answer for each of ``n`` settles, out of the settle scripts' replies (1 = applied)."""
    out = [False] * n
    for indexes, reply in zip(order, replies, strict=True):
        for i, code in zip(indexes, reply, strict=True):
            out[i] = code == 1
    return out
