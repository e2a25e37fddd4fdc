"""The queues a ``Worker`` is given are checked when it is made, as every queue name is at the
API boundary: a bad one is a ``ConfigError`` naming it, before any backend sees it (a worker
once took ``"q\\n"``, a dict or a str's letters and claimed from them)."""

from __future__ import annotations

from typing import Any

import pytest

from relaymq import Worker
from relaymq.backends.memory import InMemoryBackend
from relaymq.errors import ConfigError


@pytest.mark.parametrize(
    ("queues", "named"),
    [
        (["emails", "bad queue"], "'bad queue'"),
        (["emails\n"], r"'emails\\n'"),
        (["emails", ""], "''"),
        (["x" * 129], "'xxxx"),
        (["emails", {"$ne": None}], "queue name must be a str"),
        ("emails", "not the str 'emails'"),
        ([], "at least one queue"),
    ],
    ids=["space", "newline", "empty", "too-long", "not-a-str", "a-str-not-a-list", "none"],
)
def test_a_worker_refuses_a_bad_queue_name_naming_it(queues: Any, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        Worker(InMemoryBackend(), queues)


def test_a_worker_keeps_valid_names_in_order_without_repeats() -> None:
    worker = Worker(InMemoryBackend(), ["b", "a.b:c@d-e_f", "b"])
    assert worker.queues == ["b", "a.b:c@d-e_f"]
