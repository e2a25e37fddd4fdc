"""``settle_claim`` repeats the ``settle`` and ``claim`` statements (each statement stays whole
in queries.sql): the repeated parts must stay the same text, so that a change to one reaches
the worker's combined path too. No server needed."""

from __future__ import annotations

import re

from relaymq.backends.postgres.statements import Q
from relaymq.backends.sqlfile import fragments

FRAGMENTS = fragments("relaymq.backends.postgres", "queries.sql")

# claim's parameters, and what settle_claim numbers them: $1 queues -> $11, $2 worker -> $12,
# $3 limit -> $13, $4 now -> $8, $5 promote -> $14 ($6, limited, is false there).
CLAIM_PARAMS = {"1": "11", "2": "12", "3": "13", "4": "8", "5": "14"}


def body(sql: str, start: str, end: str) -> str:
    """The text from ``start`` up to ``end`` (excluded), comments and blank space ignored."""
    return flat(sql[sql.index(start) : sql.index(end, sql.index(start))])


def flat(text: str) -> str:
    """``text`` as ``body`` gives it: comments and blank space left out."""
    lines = [re.sub(r"\s*--.*$", "", line).strip() for line in text.splitlines()]
    return "\n".join(line for line in lines if line)


def test_the_settle_part_is_the_settle_statement() -> None:
    for start, end in (("s AS (", "done AS ("), ("done AS (", "RETURNING j.queue, j.id")):
        assert body(Q["settle_claim"], start, end) == body(Q["settle"], start, end)


def test_the_claim_part_is_the_claim_statement_for_queues_without_limits() -> None:
    claim = re.sub(r"\$(\d)\b", lambda m: "$" + CLAIM_PARAMS.get(m[1], m[1]), Q["claim"])
    combined = body(Q["settle_claim"], "ready AS (", "took AS (").rstrip(",")
    # ... but for the sequences, which see the settles of the same statement as applied
    settled, free = (flat(FRAGMENTS[n]) for n in ("sequence_free_settled", "sequence_free"))
    assert settled in combined
    assert combined.replace(settled, free) == body(claim, "ready AS (", "SELECT c.*")
    # Alone, the statement takes a queue with limits when its caller holds their lock ($6).
    alone = body(claim, "qs AS (", "ready AS (").replace(
        "AND ($6 OR NOT EXISTS (SELECT 1 FROM relaymq_limits l WHERE l.queue = q.name))",
        "AND NOT EXISTS (SELECT 1 FROM relaymq_limits l WHERE l.queue = q.name)",
    )
    assert body(Q["settle_claim"], "qs AS (", "ready AS (") == alone
