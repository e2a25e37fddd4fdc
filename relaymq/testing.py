"""Helpers for tests of code that uses relaymq: a controllable clock."""

from __future__ import annotations


class FakeClock:
    """A clock that moves only when told to. Pass it as ``clock=`` to a backend."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds``; returns the new time."""
        self.now += seconds
        return self.now
