"""The arguments a task takes: checked against its handler's signature when a job is made
(``Queue.add``, ``enqueue``, ``schedule``), so a call that cannot fit is refused at once with
``ArgumentValidationError`` instead of failing with a ``TypeError`` on every attempt.

A handler's leading ``JobContext`` parameter is the worker's to give and is left out.
Handlers whose parameters are all positional-or-keyword (nearly all) are checked without
building a ``BoundArguments``; anything else, and every refusal, goes through
``inspect.Signature.bind``, whose message names the argument.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from relaymq.errors import ArgumentValidationError


class Parameters:
    """The parameters a caller gives a handler (``fn``; without its context parameter when
    ``skip_first``). A handler whose signature cannot be read takes anything."""

    def __init__(self, fn: Callable[..., Any], skip_first: bool) -> None:
        try:
            signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):  # a builtin or C callable with no readable signature
            signature = None
        params = [] if signature is None else list(signature.parameters.values())
        params = params[1:] if skip_first else params
        self.signature = None if signature is None else signature.replace(parameters=params)
        simple = all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params)
        self._names = tuple(p.name for p in params) if simple else None
        self._position = {name: k for k, name in enumerate(self._names or ())}
        self._required = sum(p.default is p.empty for p in params)

    def check(self, task: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """Raise ``ArgumentValidationError`` naming ``task`` when the arguments do not fit."""
        if self.signature is None or self._fits(args, kwargs):
            return
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise ArgumentValidationError(f"task {task}: the arguments do not fit it: {e}") from e

    def _fits(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
        """True when they surely fit (positional-or-keyword parameters only); False means
        "ask ``bind``". Plain loops: this runs for every job enqueued."""
        names, given = self._names, len(args)
        if names is None or given > len(names):
            return False
        if kwargs:
            position = self._position
            for key in kwargs:  # each names a parameter not already given by position
                if position.get(key, -1) < given:
                    return False
        for name in names[given : self._required]:  # each required one left is a keyword
            if name not in kwargs:
                return False
        return True
