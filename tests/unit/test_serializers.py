"""The default serializer gives back what it was given, or refuses it at enqueue."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import uuid
from typing import Any

import pytest

from relaymq import Queue, SerializationError
from relaymq.backends.memory import InMemoryBackend
from relaymq.serializers import DEFAULT_SERIALIZER
from tests import tasks


class Colour(enum.Enum):
    RED = 1


class Size(enum.StrEnum):
    BIG = "big"


class Level(enum.IntEnum):
    HIGH = 2


@dataclasses.dataclass
class Point:
    x: int


class Name(str):
    pass


REFUSED: list[tuple[Any, str]] = [
    (datetime.datetime(2026, 1, 2, 3, 4, 5), "datetime.datetime"),
    (datetime.date(2026, 1, 2), "datetime.date"),
    (datetime.time(3, 4), "datetime.time"),
    (uuid.UUID(int=7), "uuid.UUID"),
    (decimal.Decimal("1.5"), "decimal.Decimal"),
    (Colour.RED, "Colour"),
    (Size.BIG, "Size"),  # a str subclass: would come back as a plain str
    (Level.HIGH, "Level"),
    (Point(1), "Point"),
    (Name("x"), "Name"),
    ({1, 2}, "set"),
    (frozenset({1}), "frozenset"),
    (b"raw", "bytes"),
    (float("nan"), "NaN"),
    (float("inf"), "infinity"),
    (2**64, "beyond 64 bits"),
    ({1: "a"}, "int dict key"),
]


@pytest.mark.parametrize(("value", "named"), REFUSED)
async def test_values_that_would_change_type_are_refused_and_nothing_is_stored(
    value: Any, named: str
) -> None:
    queue = Queue("ser", InMemoryBackend())
    with pytest.raises(SerializationError) as e:
        await queue.add(tasks.add.call(1, {"when": [0, value]}))  # type: ignore[arg-type]
    assert "args[1]['when'][1]" in str(e.value)  # where it is
    assert named in str(e.value)  # and what it is
    with pytest.raises(SerializationError, match=r"kwargs\['b'\]"):
        await queue.add(tasks.add.call(1, b=value))
    assert sum((await queue.counts()).values()) == 0


async def test_one_bad_call_in_a_bulk_stores_nothing() -> None:
    queue = Queue("ser", InMemoryBackend())
    with pytest.raises(SerializationError, match=r"args\[0\]"):
        await queue.add_bulk([tasks.add.call(1, 2), tasks.add.call(datetime.date.today(), 2)])  # type: ignore[arg-type]
    assert sum((await queue.counts()).values()) == 0


def test_plain_json_values_round_trip_as_the_same_types() -> None:
    value = {
        "none": None,
        "t": True,
        "f": False,
        "int": -(2**63),
        "big": 2**64 - 1,
        "float": 1.5,
        "whole_float": 2.0,
        "str": "a\x00é",
        "list": [1, [2, {"x": []}]],
        "dict": {"k": {}},
    }
    back = DEFAULT_SERIALIZER.loads(DEFAULT_SERIALIZER.dumps(value))
    assert back == value
    assert type(back["whole_float"]) is float and type(back["t"]) is bool


def test_tuples_are_accepted_and_come_back_as_lists() -> None:
    """Documented in relaymq/serializers.py: a tuple argument reaches the handler as a list."""
    assert DEFAULT_SERIALIZER.loads(DEFAULT_SERIALIZER.dumps({"a": (1, (2, 3))})) == {
        "a": [1, [2, 3]]
    }


def test_a_result_that_would_change_type_is_refused_too() -> None:
    with pytest.raises(SerializationError, match=r"the value .*datetime"):
        DEFAULT_SERIALIZER.dumps(datetime.datetime(2026, 1, 1))
