"""``Settler.claim``: the claim loop's one way to jobs. While the queues run dry a claim goes with
the next settle (one round trip), under a backlog it is made beside the settles, after an
outcome going back in line it waits for that outcome; closing ends it, and what a claim in
flight still brings is given back. On the in-memory backend and a test clock, without a
running worker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from relaymq.backends.memory import InMemoryBackend
from relaymq.errors import BackendUnavailableError
from relaymq.instrumented import Instrumented
from relaymq.job import JobState
from relaymq.records.store import ClaimBatch, Outcome, Settle, SettledClaimed
from relaymq.testing import FakeClock
from relaymq.worker.running import Claims
from relaymq.worker.settling import Settler
from tests.support.jobs import get_job, new_job
from tests.support.notes import Notes


class Calls:
    """The facade's claims and settles, counted by kind."""

    def __init__(self, ops: Instrumented) -> None:
        self.made: list[str] = []
        for name in ("claim", "settle", "settle_and_claim"):
            setattr(ops, name, self._counted(name, getattr(ops, name)))

    def _counted(self, name: str, call: Callable[..., Awaitable[Any]]) -> Any:
        async def counted(*args: Any) -> Any:
            self.made.append(name)
            return await call(*args)

        return counted


@pytest.fixture
def backend() -> InMemoryBackend:
    return InMemoryBackend(clock=FakeClock())


@pytest.fixture
def notes() -> Notes:
    return Notes()


@pytest.fixture
async def settler(backend: InMemoryBackend, notes: Notes) -> AsyncIterator[Settler]:
    """A settler that claims with its settles, its settle loop running."""
    settler = Settler(Instrumented(backend), Claims(), notes, coalesce=True)
    loop = asyncio.create_task(settler.run())
    yield settler
    loop.cancel()
    await asyncio.gather(loop, return_exceptions=True)


async def claim(settler: Settler, limit: int) -> ClaimBatch:
    async with asyncio.timeout(5):
        batch = await settler.claim(["q"], "w", limit)
    assert batch is not None
    return batch


def ended(settler: Settler, batch: ClaimBatch, outcome: Outcome = Outcome.COMPLETE) -> None:
    """Every job of ``batch`` ran: its outcome waits to be settled."""
    for job in batch.jobs:
        r = settler.claims.add(job)
        settler.claims.handler_ended(r)
        settler.add(r, Settle(r.claim, outcome))


async def test_while_the_queues_run_dry_the_next_settle_makes_the_claim(
    backend: InMemoryBackend, settler: Settler, notes: Notes
) -> None:
    await backend.enqueue([new_job("q", "a"), new_job("q", "b")])
    first = await claim(settler, 5)  # short: the queues run dry
    await backend.enqueue([new_job("q", "c")])
    calls = Calls(settler.ops)
    ended(settler, first)
    second = await claim(settler, 5)
    assert [j.id for j in second.jobs] == ["c"]
    assert calls.made == ["settle_and_claim"]  # one round trip for both
    assert notes.claimed_jobs == 3


async def test_under_a_backlog_a_claim_is_made_beside_the_settles(
    backend: InMemoryBackend,
) -> None:
    settler = Settler(Instrumented(backend), Claims(), Notes(), coalesce=True)  # no settle loop
    await backend.enqueue([new_job("q", f"j{i}") for i in range(4)])
    first = await claim(settler, 2)  # all it asked for: a backlog
    calls = Calls(settler.ops)
    ended(settler, first)
    second = await claim(settler, 2)  # made at once, its outcomes still waiting
    assert [j.id for j in second.jobs] == ["j2", "j3"]
    assert calls.made == ["claim"] and len(settler) == 2


async def test_a_claim_waits_for_an_outcome_going_back_in_line(
    backend: InMemoryBackend,
) -> None:
    """I10 without coalescing: R, retried at once, competes in the next claim, ahead of B."""
    settler = Settler(Instrumented(backend), Claims(), Notes())  # no settle loop
    await backend.enqueue([new_job("q", "R", priority=1), new_job("q", "B", priority=5)])
    first = await claim(settler, 1)
    ended(settler, first, Outcome.RETRY)
    waiting = asyncio.create_task(settler.claim(["q"], "w", 1))
    await asyncio.sleep(0)  # one turn: the claim starts, and finds R's retry unwritten
    assert not waiting.done()
    await settler.flush()
    async with asyncio.timeout(5):
        second = await waiting
    assert second is not None and [(j.id, j.attempts) for j in second.jobs] == [("R", 2)]


async def test_a_claim_made_with_a_failing_settle_is_made_alone(
    backend: InMemoryBackend, settler: Settler
) -> None:
    await backend.enqueue([new_job("q", "a")])
    first = await claim(settler, 5)  # short: the queues run dry
    await backend.enqueue([new_job("q", "b")])
    original = backend.settle

    async def unavailable(settles: Any) -> Any:
        raise BackendUnavailableError("the server went away")

    backend.settle = unavailable  # type: ignore[method-assign]
    calls = Calls(settler.ops)
    ended(settler, first)
    second = await claim(settler, 5)  # not held up by the outcome that cannot be written
    assert [j.id for j in second.jobs] == ["b"]
    assert calls.made[:2] == ["settle_and_claim", "claim"]
    backend.settle = original  # type: ignore[method-assign]
    await settler.flush()
    assert len(settler) == 0


async def test_the_error_of_a_claim_made_with_a_settle_goes_to_the_claimer(
    backend: InMemoryBackend, settler: Settler
) -> None:
    await backend.enqueue([new_job("q", "a")])
    first = await claim(settler, 5)

    async def claim_fails(settles: Any, *ask: Any) -> Any:
        return SettledClaimed(await backend.settle(settles), claim_error=RuntimeError("boom"))

    backend.settle_and_claim = claim_fails  # type: ignore[method-assign,assignment]
    ended(settler, first)
    with pytest.raises(RuntimeError, match="boom"):
        await claim(settler, 5)
    assert (await get_job(backend, "q", "a")).state is JobState.COMPLETED  # type: ignore[union-attr]


async def test_closing_ends_a_claim_and_gives_back_what_a_claim_in_flight_took(
    backend: InMemoryBackend, notes: Notes
) -> None:
    settler = Settler(Instrumented(backend), Claims(), notes, coalesce=True)  # no settle loop
    await backend.enqueue([new_job("q", "a")])
    first = await claim(settler, 5)
    await backend.enqueue([new_job("q", "b")])
    entered, gate, original = asyncio.Event(), asyncio.Event(), backend.settle_and_claim

    async def slow(*args: Any) -> Any:
        entered.set()
        await gate.wait()
        return await original(*args)

    backend.settle_and_claim = slow  # type: ignore[method-assign,assignment]
    ended(settler, first)
    waiting = asyncio.create_task(settler.claim(["q"], "w", 5))
    await asyncio.sleep(0)  # one turn: the claim is left to the next settle
    flushing = asyncio.create_task(settler.flush())
    async with asyncio.timeout(5):  # the settle making the claim reaching the backend
        await entered.wait()
    settler.close()  # the worker stops
    async with asyncio.timeout(5):
        assert await waiting is None
    gate.set()
    async with asyncio.timeout(5):
        await flushing
    assert notes.claimed_jobs == 2 and len(settler) == 1  # b, claimed, to be given back
    await settler.flush()
    b = await get_job(backend, "q", "b")
    assert b is not None and b.state is JobState.WAITING and b.attempts == 0
    assert len(settler.claims) == 0
    assert await settler.claim(["q"], "w", 5) is None  # nothing is claimed once closed
