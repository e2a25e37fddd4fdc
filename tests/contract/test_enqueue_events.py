"""``enqueue_announced``: jobs stored and each one's event published; where a backend does
both in one round trip, it never calls ``publish`` for them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from relaymq import events
from relaymq.backends.base import Backend
from relaymq.instrumented import Instrumented
from tests.conftest import MakeBackend
from tests.support.jobs import get_job, new_job


async def test_each_enqueue_is_announced_as_waiting_delayed_or_deduplicated(
    make_backend: MakeBackend, q: str
) -> None:
    producer, listener = await make_backend(), await make_backend()
    one_trip = type(producer).enqueue_announced is not Backend.enqueue_announced
    if one_trip:  # the events go out with the jobs: publish is never asked

        async def refused(messages: Any) -> None:
            raise AssertionError("enqueue_announced called publish")

        producer.publish = refused  # type: ignore[method-assign]
    await producer.enqueue([new_job(q, "old")])
    sub = await Instrumented(listener).subscribe()
    try:
        batch = [new_job(q, "a"), new_job(q, "b", delay=60), new_job(q, "old"), new_job(q, "a")]
        answers = await producer.enqueue_announced(batch, at=1_700_000_000.25)
        assert [(a.id, a.duplicate) for a in answers] == [
            ("a", False),
            ("b", False),
            ("old", True),
            ("a", True),
        ]
        got = [await asyncio.wait_for(anext(sub), 10) for _ in range(4)]
    finally:
        await sub.aclose()
    assert [(e.name, e.queue, e.job_id, e.data) for e in got] == [
        (events.JOB_WAITING, q, "a", {}),
        (events.JOB_DELAYED, q, "b", {}),
        (events.JOB_DEDUPLICATED, q, "old", {}),
        (events.JOB_DEDUPLICATED, q, "a", {}),
    ]
    assert all(e.at == pytest.approx(1_700_000_000.25, abs=0.01) for e in got)
    stored = await get_job(producer, q, "b")
    assert stored is not None and stored.state.value == "delayed"
