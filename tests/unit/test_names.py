"""Names and ids are checked whole: ``$`` in a pattern also matches before a final newline, so
every name pattern is applied with ``fullmatch`` (issue 28, item 9)."""

from __future__ import annotations

import pytest

from relaymq import Queue, Schedule
from relaymq.backends.memory import InMemoryBackend
from relaymq.backends.postgres.config import parse
from relaymq.errors import ConfigError
from relaymq.options import validate_queue_name


@pytest.mark.parametrize("name", ["q\n", "q\r\n", "\nq", "q\x00", "", "q q", "q" * 129])
def test_a_queue_name_is_checked_whole(name: str) -> None:
    with pytest.raises(ConfigError, match="invalid queue name"):
        validate_queue_name(name)
    with pytest.raises(ConfigError, match="invalid queue name"):
        Queue(name, InMemoryBackend())


def test_a_schedule_id_is_checked_whole() -> None:
    with pytest.raises(ConfigError, match="invalid schedule id"):
        Schedule(id="daily\n", task="app:report", queue="q", every=60)
    assert Schedule(id="daily/eu", task="app:report", queue="q", every=60).id == "daily/eu"


def test_a_postgres_schema_is_checked_whole() -> None:
    with pytest.raises(ConfigError, match="schema must be a plain identifier"):
        parse("postgresql://u@h/db?schema=relaymq%0A", {})
    assert parse("postgresql://u@h/db?schema=relaymq", {}).schema == "relaymq"


@pytest.mark.parametrize("name", [{"$ne": None}, None, 5, b"q"])
def test_a_queue_name_that_is_not_a_str_is_refused_by_name(name: object) -> None:
    with pytest.raises(ConfigError, match="queue name must be a str"):
        validate_queue_name(name)  # type: ignore[arg-type]
