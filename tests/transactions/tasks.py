"""A task for the worker processes of the transaction tests (``relaymq worker
tests.transactions.tasks``): it appends one line to a file per run."""

from __future__ import annotations

import relaymq


@relaymq.task(name="tests.transactions.tasks:mark")
def mark(path: str) -> None:
    with open(path, "a") as f:
        f.write("ran\n")
