"""Sequences (``NewJob.sequence``) on every backend that keeps them: the jobs of one sequence
of a queue run one at a time, in enqueue order, decided by the claim itself, so it holds over
every process's claims together; a dead-lettered job holds its sequence until it is retried,
cancelled or removed (or, with ``SequenceFailure.CONTINUE``, lets the next run). Backends
without ``Capabilities.sequences`` refuse such jobs, naming themselves, and store nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections import Counter

import pytest

from relaymq.app import App
from relaymq.backends.base import Backend
from relaymq.errors import ConfigError
from relaymq.job import Job, JobState, SequenceFailure
from relaymq.queue import Queue
from relaymq.records.limits import Limits
from relaymq.records.store import Outcome, Settle
from relaymq.testing import FakeClock
from tests.conftest import MakeBackend
from tests.contract.test_keys import claim_exactly, state
from tests.contract.test_limits import claim_from_all, claim_until_limited
from tests.support.jobs import new_job


@pytest.fixture
def sequences(backend: Backend) -> Backend:
    if not backend.capabilities.sequences:
        pytest.skip("the backend does not keep sequences (it refuses them: see below)")
    return backend


def done(job: Job) -> Settle:
    return Settle(job.claim, Outcome.COMPLETE, result=b"1")


async def test_jobs_of_a_sequence_run_one_at_a_time_in_enqueue_order_over_many_processes(
    make_backend: MakeBackend, sequences: Backend, q: str
) -> None:
    handles = [sequences, *[await make_backend() for _ in range(2)]]
    order = [(f"s{n % 5}", f"s{n % 5}-{n // 5:02}") for n in range(50)]  # interleaved
    await handles[0].enqueue([new_job(q, i, sequence=s) for s, i in order])
    started: dict[str, list[str]] = {}
    async with asyncio.timeout(30):
        while sum(map(len, started.values())) < 50:
            taken = await claim_from_all(handles, q, 3)
            running = Counter(j.sequence for j in taken)
            assert max(running.values(), default=0) <= 1, running  # never two of one at once
            for job in taken:
                started.setdefault(str(job.sequence), []).append(job.id)
            for n, job in enumerate(taken):  # settled by one handle or another
                await handles[n % 3].settle([done(job)])
    assert {s: ids for s, ids in started.items()} == {
        s: [i for t, i in order if t == s] for s in {t for t, _ in order}
    }


async def test_the_claim_passes_over_a_held_sequence_to_the_jobs_behind(
    sequences: Backend, q: str
) -> None:
    seqs = {"a1": "a", "a2": "a", "n1": None, "b1": "b", "a3": "a", "b2": "b"}
    await sequences.enqueue([new_job(q, i, sequence=s) for i, s in seqs.items()])
    first = await claim_until_limited(sequences, q)
    assert sorted(j.id for j in first) == ["a1", "b1", "n1"]  # a2, a3, b2 keep their place
    batch = await sequences.claim([q], "w", 10)
    assert batch.jobs == [] and batch.limited == {q: None}  # until the heads end
    by_id = {j.id: j for j in first}
    await sequences.settle([done(by_id["b1"])])
    assert [j.id for j in await claim_exactly(sequences, q, 1)] == ["b2"]
    await sequences.settle([Settle(by_id["a1"].claim, Outcome.RETRY, error="x", delay=0)])
    again = await claim_until_limited(sequences, q)
    assert [j.id for j in again] == ["a1"]  # a retried job keeps its place at the head


async def test_a_key_the_claim_spends_holds_back_a_job_its_sequence_holds_too(
    sequences: Backend, clock: FakeClock, q: str
) -> None:
    """A key refuses before a sequence does (``KeyBudget.refuses``): a job passed over for
    both waits for its key's window, which the claim reports, even when the claim itself
    spent the key and started the job's sequence."""
    clock.advance(-clock() % 5)  # the start of a key window
    await sequences.set_limits(q, Limits(key_rate=1, key_per=5))
    jobs = [("a1", "a", None), ("t1", None, "t"), ("t2", "a", "t")]
    await sequences.enqueue([new_job(q, i, limit_key=k, sequence=s) for i, k, s in jobs])
    batch = await sequences.claim([q], "w", 3)
    assert sorted(j.id for j in batch.jobs) == ["a1", "t1"]
    assert batch.limited == {q: pytest.approx(5.0)}  # the key's window, not "as jobs end"


async def test_settling_the_head_and_claiming_in_one_call_takes_the_next(
    sequences: Backend, q: str
) -> None:
    await sequences.enqueue([new_job(q, f"n{n}", sequence="n") for n in range(3)])
    [n0] = await claim_exactly(sequences, q, 1)
    answer = await sequences.settle_and_claim([done(n0)], [q], "w", 10)
    assert answer.applied == [True] and answer.batch is not None
    assert [j.id for j in answer.batch.jobs] == ["n1"]  # n0's end seen by the same claim
    [n1] = answer.batch.jobs
    failed = Settle(n1.claim, Outcome.FAIL, error="boom")
    answer = await sequences.settle_and_claim([failed], [q], "w", 10)
    assert answer.applied == [True] and answer.batch is not None
    assert answer.batch.jobs == [] and answer.batch.limited == {q: None}  # n1 holds it


async def test_a_failed_job_holds_its_sequence_until_it_is_retried(
    sequences: Backend, q: str
) -> None:
    await sequences.enqueue([new_job(q, f"a{n}", sequence="a") for n in range(3)])
    [a0] = await claim_exactly(sequences, q, 1)
    await sequences.settle([Settle(a0.claim, Outcome.FAIL, error="boom")])
    assert (await sequences.claim([q], "w", 10)).jobs == []  # a1 waits for a0
    head = await sequences.sequence_head(q, "a")
    assert head is not None and (head.id, head.state) == ("a0", JobState.FAILED)
    assert await sequences.retry_jobs(q, ["a0"]) == [True]
    [again] = await claim_exactly(sequences, q, 1)
    assert again.id == "a0"  # the replayed job runs before the ones behind it
    await sequences.settle([done(again)])
    assert [j.id for j in await claim_until_limited(sequences, q)] == ["a1"]


async def test_an_expired_job_holds_its_sequence_too(sequences: Backend, q: str) -> None:
    await sequences.enqueue([new_job(q, f"e{n}", sequence="e") for n in range(2)])
    [e0] = await claim_exactly(sequences, q, 1)
    await sequences.settle([Settle(e0.claim, Outcome.EXPIRE, error="ttl")])
    assert (await sequences.claim([q], "w", 10)).jobs == []
    head = await sequences.sequence_head(q, "e")
    assert head is not None and (head.id, head.state) == ("e0", JobState.EXPIRED)


async def test_with_continue_a_failed_job_lets_the_next_run(sequences: Backend, q: str) -> None:
    go_on = SequenceFailure.CONTINUE
    await sequences.enqueue(
        [new_job(q, f"c{n}", sequence="c", sequence_on_failure=go_on) for n in range(3)]
    )
    [c0] = await claim_exactly(sequences, q, 1)
    await sequences.settle([Settle(c0.claim, Outcome.FAIL, error="boom")])
    [c1] = await claim_exactly(sequences, q, 1)
    assert c1.id == "c1" and c1.sequence_on_failure is go_on
    assert (await sequences.claim([q], "w", 10)).jobs == []  # still one at a time
    head = await sequences.sequence_head(q, "c")
    assert head is not None and (head.id, head.state) == ("c1", JobState.ACTIVE)


async def test_removing_the_failed_head_frees_its_sequence(sequences: Backend, q: str) -> None:
    await sequences.enqueue([new_job(q, f"h{n}", sequence="h") for n in range(3)])
    [h0] = await claim_exactly(sequences, q, 1)
    await sequences.settle([Settle(h0.claim, Outcome.FAIL, error="boom")])
    assert (await sequences.claim([q], "w", 10)).jobs == []
    assert await sequences.remove_jobs(q, ["h0"]) == [True]
    [h1] = await claim_exactly(sequences, q, 1)
    assert h1.id == "h1"
    # Cancelling a waiting job of the sequence takes it out of line as well.
    assert await sequences.cancel_jobs(q, ["h2"]) == [True]
    await sequences.settle([done(h1)])
    assert await sequences.sequence_head(q, "h") is None  # the sequence is free
    assert await state(sequences, q, "h2") is JobState.CANCELLED


async def test_cancelling_the_held_head_frees_its_sequence(sequences: Backend, q: str) -> None:
    await sequences.enqueue([new_job(q, f"k{n}", sequence="k") for n in range(2)])
    [k0] = await claim_exactly(sequences, q, 1)
    await sequences.settle([Settle(k0.claim, Outcome.RETRY, error="later", delay=300)])
    assert (await sequences.claim([q], "w", 10)).jobs == []  # k1 waits for its head
    assert await sequences.cancel_jobs(q, ["k0"]) == [True]
    [k1] = await claim_exactly(sequences, q, 1)
    assert k1.id == "k1"
    # A cancelled job that is retried comes back at its place: it holds the sequence again,
    # and starts once the job of its sequence that is active (k1, behind it) has ended.
    assert await sequences.retry_jobs(q, ["k0"]) == [True]
    head = await sequences.sequence_head(q, "k")
    assert head is not None and (head.id, head.state) == ("k0", JobState.WAITING)
    assert (await sequences.claim([q], "w", 10)).jobs == []
    await sequences.settle([done(k1)])
    assert [j.id for j in await claim_exactly(sequences, q, 1)] == ["k0"]


async def test_a_delayed_head_holds_its_sequence_until_it_runs(
    sequences: Backend, clock: FakeClock, q: str
) -> None:
    await sequences.enqueue([new_job(q, "d0", sequence="d"), new_job(q, "d1", sequence="d")])
    [d0] = await claim_exactly(sequences, q, 1)
    await sequences.settle([Settle(d0.claim, Outcome.RETRY, error="later", delay=30)])
    assert (await sequences.claim([q], "w", 10)).jobs == []  # d1 waits for its head
    head = await sequences.sequence_head(q, "d")
    assert head is not None and (head.id, head.state) == ("d0", JobState.DELAYED)
    clock.advance(31)
    assert [j.id for j in await claim_exactly(sequences, q, 1)] == ["d0"]


async def test_a_stalled_head_holds_its_sequence_until_recovered(
    sequences: Backend, clock: FakeClock, q: str
) -> None:
    await sequences.enqueue([new_job(q, "t0", sequence="t"), new_job(q, "t1", sequence="t")])
    assert [j.id for j in await claim_exactly(sequences, q, 1)] == ["t0"]
    clock.advance(60)  # its worker went silent
    assert (await sequences.claim([q], "w", 10)).jobs == []
    assert (await sequences.recover_stalled(q, 30, max_stalled=5)).requeued == ["t0"]
    assert [j.id for j in await claim_until_limited(sequences, q)] == ["t0"]


async def test_sequences_are_per_queue_and_listed_with_their_jobs(
    sequences: Backend, q: str
) -> None:
    other = q + "-b"
    await sequences.enqueue([new_job(q, "x0", sequence="x"), new_job(other, "x0", sequence="x")])
    assert len(await claim_exactly(sequences, q, 1)) == 1
    assert len(await claim_exactly(sequences, other, 1)) == 1  # its own sequence "x"
    [listed] = await sequences.list_jobs(q, JobState.ACTIVE)
    assert (listed.sequence, listed.sequence_on_failure) == ("x", SequenceFailure.HOLD)


async def test_a_backend_without_sequences_refuses_them_and_stores_nothing(
    backend: Backend, q: str
) -> None:
    if backend.capabilities.sequences:
        pytest.skip("the backend keeps sequences")
    refused = r"RabbitMQBackend over \w+ does not run sequences"
    with pytest.raises(ConfigError, match=refused):
        await backend.enqueue([new_job(q, "plain"), new_job(q, "s", sequence="s")])
    assert sum((await backend.counts(q)).values()) == 0


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"sequence": ""}, "sequence must be 1 to 255"),
        ({"sequence": "x" * 256}, "sequence must be 1 to 255"),
        ({"sequence": 42}, "sequence must be a str"),
        ({"sequence": "a\nb"}, "control character"),
        ({"sequence": "a", "depends_on": ["x"]}, "no depends_on"),
        ({"sequence": "a", "debounce": ("k", 1.0)}, "cannot be debounced"),
        ({"sequence": "a", "sequence_on_failure": "skip"}, "'hold' or 'continue'"),
    ],
)
async def test_bad_sequence_options_are_refused_and_nothing_is_stored(
    options: dict[str, object], match: str
) -> None:
    app = App("memory://")

    @app.task(queue="seq-bad")
    async def noop() -> None:
        return None

    await app.connect()
    with pytest.raises(ConfigError, match=match):
        await noop.with_options(**options).enqueue()  # type: ignore[arg-type]
    call = noop.call()  # the same options on a call given to Queue.add
    call.options = dataclasses.replace(call.options, **options)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=match):
        await Queue("seq-bad", app).add(call)
    assert sum((await Queue("seq-bad", app).counts()).values()) == 0
    await app.close()


def test_sequence_options_reach_the_job() -> None:
    app = App("memory://")

    @app.task(queue="seq-ok")
    async def noop() -> None:
        return None

    task = noop.with_options(sequence="customer:42", sequence_on_failure="continue")
    assert task.options.sequence == "customer:42"
    assert task.options.sequence_on_failure is SequenceFailure.CONTINUE
    assert list(itertools.islice(iter(SequenceFailure), 2)) == [
        SequenceFailure.HOLD,
        SequenceFailure.CONTINUE,
    ]


def test_an_outbox_envelope_keeps_a_jobs_sequence() -> None:
    from relaymq.records import outbox

    job = new_job("q", "e1", sequence="s", sequence_on_failure=SequenceFailure.CONTINUE)
    [back] = outbox.opened(outbox.envelope([job], 0.0).payload, 0.0)
    assert back == job and back.sequence_on_failure is SequenceFailure.CONTINUE


def test_the_rule_names_the_head_only_when_it_may_start() -> None:
    from relaymq.policy import sequence_head

    hold, go_on = SequenceFailure.HOLD, SequenceFailure.CONTINUE
    assert sequence_head([("a", "completed", hold), ("b", "waiting", hold)]) == "b"
    assert sequence_head([("a", "failed", hold), ("b", "waiting", hold)]) is None
    assert sequence_head([("a", "failed", go_on), ("b", "waiting", hold)]) == "b"
    assert sequence_head([("a", "cancelled", hold), ("b", "waiting", hold)]) == "b"
    assert sequence_head([("a", "delayed", hold), ("b", "waiting", hold)]) is None
    # an active job anywhere in the sequence holds it (one that started while "a" had left)
    assert sequence_head([("a", "waiting", hold), ("b", "active", hold)]) is None
    assert sequence_head([]) is None
