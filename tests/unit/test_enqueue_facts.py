"""The enqueue facts a one-round-trip backend publishes (a Redis script, a PostgreSQL statement)
decode into the very events ``events.enqueued`` gives: the event format lives in events.py."""

from __future__ import annotations

import orjson

from relaymq.records import events
from relaymq.records.store import Enqueued
from tests.support.jobs import new_job

AT = 1_700_000_000.25


def test_facts_decode_into_the_events_of_the_enqueue() -> None:
    jobs = [
        new_job("q", "a"),
        new_job("q", "b", delay=5),
        new_job("r", "c", depends_on=("a",)),
        new_job("q", "a"),
    ]
    answers = [Enqueued("a"), Enqueued("b"), Enqueued("c"), Enqueued("a", duplicate=True)]
    message = orjson.dumps(events.enqueue_facts(jobs, answers, AT))
    assert (
        events.decode(message)
        == events.enqueued(jobs, answers, AT)
        == [
            events.Event(events.JOB_WAITING, "q", AT, "a"),
            events.Event(events.JOB_DELAYED, "q", AT, "b"),
            events.Event(events.JOB_BLOCKED, "r", AT, "c"),
            events.Event(events.JOB_DEDUPLICATED, "q", AT, "a"),
        ]
    )


def test_a_script_s_facts_with_the_time_as_text_decode_too() -> None:
    message = b'{"enqueued":[["waiting","q","a"],["duplicate","q","b"]],"at":"1700000000.25"}'
    assert events.decode(message) == [
        events.Event(events.JOB_WAITING, "q", AT, "a"),
        events.Event(events.JOB_DEDUPLICATED, "q", AT, "b"),
    ]


def test_facts_that_are_not_ours_decode_to_nothing() -> None:
    for message in (
        b'{"enqueued":[["exploded","q","a"]],"at":1}',
        b'{"enqueued":[],"at":"x"}',
        b'{"enqueued":[["waiting"]],"at":1}',
        b'{"enqueued":3,"at":1}',
    ):
        assert events.decode(message) == []
