"""``Settler.lined_up``: the worker's next claim waits for a settle that puts a job back in line
(a release, a retry without delay), so that job competes in it (RELIABILITY.md I10; issue 36).
On the in-memory backend and a test clock, without a running worker."""

from __future__ import annotations

from typing import Any

import pytest

from relaymq.backends.memory import InMemoryBackend
from relaymq.errors import BackendUnavailableError
from relaymq.instrumented import Instrumented
from relaymq.job import Job
from relaymq.records.store import Outcome, Settle
from relaymq.testing import FakeClock
from relaymq.worker.running import Claims
from relaymq.worker.settling import Settler
from tests.support.jobs import new_job
from tests.support.notes import Notes


async def claimed(backend: InMemoryBackend, n: int) -> list[Job]:
    await backend.enqueue([new_job("q") for _ in range(n)])
    return (await backend.claim(["q"], "w1", n)).jobs


def settler_for(backend: InMemoryBackend) -> tuple[Settler, Claims]:
    claims = Claims()
    return Settler(Instrumented(backend), claims, Notes()), claims


@pytest.mark.parametrize(
    ("outcome", "delay", "waits"),
    [
        (Outcome.RETRY, 0.0, True),
        (Outcome.RELEASE, 0.0, True),
        (Outcome.RETRY, 5.0, False),
        (Outcome.COMPLETE, 0.0, False),
        (Outcome.FAIL, 0.0, False),
    ],
)
async def test_only_an_outcome_back_in_line_holds_the_next_claim_until_written(
    outcome: Outcome, delay: float, waits: bool
) -> None:
    backend = InMemoryBackend(clock=FakeClock())
    [job] = await claimed(backend, 1)
    settler, claims = settler_for(backend)
    r = claims.add(job)
    claims.handler_ended(r)
    settler.add(r, Settle(r.claim, outcome, error="boom", delay=delay))
    assert settler.lined_up.is_set() is not waits
    await settler.flush()
    assert settler.lined_up.is_set()


async def test_a_failing_settle_lets_the_claims_go_on_and_holds_them_again_on_the_next_try() -> (
    None
):
    """One outcome that cannot be written must not stop the worker's other jobs."""
    backend = InMemoryBackend(clock=FakeClock())
    [job] = await claimed(backend, 1)
    settler, claims = settler_for(backend)
    original, calls = backend.settle, 0

    async def fails_once(settles: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise BackendUnavailableError("the server went away")
        return await original(settles)

    backend.settle = fails_once  # type: ignore[method-assign]
    r = claims.add(job)
    claims.handler_ended(r)
    settler.add(r, Settle(r.claim, Outcome.RETRY, error="boom"))
    with pytest.raises(BackendUnavailableError):
        await settler.flush()
    assert settler.lined_up.is_set() and len(settler) == 1  # kept for the next try
    await settler.flush()
    assert settler.lined_up.is_set() and len(settler) == 0 and calls == 2
