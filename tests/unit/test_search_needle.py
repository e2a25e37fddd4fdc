"""The bytes a search looks for before it reads payloads as JSON (``search.needle``) are in
every payload the search matches, however the payload's JSON was written: SQLite and
PostgreSQL skip a row without them, so a needle a matching payload lacks would hide a job."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from relaymq.errors import ConfigError
from relaymq.records.search import ArgMatch, JobFilter, needle

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(10**17), 10**17)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["ada@example.com", "42", "4.2e1", "x/y", "é", "<b>", 'a"b', "1e16"])
)
KEYS = st.sampled_from(["email", "customer_id", "n", "é", "a/b", 'q"'])
ENCODERS = {
    "orjson": orjson.dumps,
    "json": lambda v: json.dumps(v).encode(),
    "json, ASCII off": lambda v: json.dumps(v, ensure_ascii=False).encode(),
    "json, compact": lambda v: json.dumps(v, separators=(",", ":")).encode(),
}


def conditions(key: str, value: Any) -> list[str]:
    """Conditions an operator could type that the value may meet."""
    out = [f"kwargs.{key}={json.dumps(value)}"]
    if isinstance(value, str) and value and "=" not in value and "~" not in value:
        out += [f"kwargs.{key}={value}", f"kwargs.{key}~{value}", f"kwargs.{key}~{value[1:]}"]
    if isinstance(value, int | float) and not isinstance(value, bool):
        text = json.dumps(value)
        out += [f"kwargs.{key}~{text}", f"kwargs.{key}~{text[1:]}", f"kwargs.{key}~{text[:-1]}"]
        if float(value).is_integer() and abs(value) < 10**18:
            out.append(f"kwargs.{key}={int(value)}")
    return [c for c in out if c.split("=", 1)[-1] and c.split("~", 1)[-1]]


def matches(where: JobFilter, payload: bytes) -> bool:
    """``JobFilter.matches`` on the arguments alone."""
    return all(a.found_in(json.loads(payload)) for a in where.args)


@settings(max_examples=400, deadline=None)
@given(key=KEYS, value=SCALARS, other=SCALARS)
def test_every_matching_payload_holds_the_needle(key: str, value: Any, other: Any) -> None:
    document = {"args": [other], "kwargs": {key: value, "other": other}}
    for c in conditions(key, value):
        try:
            where = JobFilter(args=(ArgMatch.parse(c),))
        except ConfigError:  # refused before any search
            continue
        found = needle(where)
        for name, encode in ENCODERS.items():
            payload = encode(document)
            if matches(where, payload):
                assert found is None or found in payload, (c, name, payload, found)


def test_the_needle_is_the_longest_plain_value_or_else_key() -> None:
    def of(*c: str) -> bytes | None:
        return needle(JobFilter(args=tuple(ArgMatch.parse(x) for x in c)))

    assert of("kwargs.customer_id=42") == b"42"  # a value before a key
    assert of("kwargs.n=ada@example.com") == b'"ada@example.com"'
    assert of("kwargs.email~nobody", "kwargs.customer_id=42") == b"nobody"
    assert of("kwargs.customer_id=4.5") == b'"customer_id"'  # no plain value
    assert of("kwargs.e~somebody.else") == b"somebody.else"
    assert of("args.0=1234567") == b"1234567"
    assert of("args.0=true") == b"true"
    assert of("args.0~4.2") is None  # a number's text: not spelt alike in every payload
    assert of("args.0=10000000000000000") is None  # an encoder may write 1e16
    assert of("args.0=é") is None  # escaped by an ASCII-only encoder
    assert of("kwargs.a/b=1.5") is None
