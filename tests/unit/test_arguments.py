"""``relaymq.arguments``: a call is refused exactly when ``inspect.Signature.bind`` refuses it,
for every kind of signature (the quick path for plain parameters included)."""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from relaymq import JobContext
from relaymq.arguments import Parameters
from relaymq.errors import ArgumentValidationError


def plain(a: int, b: int) -> None: ...
def defaults(a: int, b: int = 1, c: int = 2) -> None: ...
def keyword_only(a: int, *, b: int, c: int = 0) -> None: ...
def positional_only(a: int, /, b: int) -> None: ...
def star_args(a: int, *rest: int) -> None: ...
def star_kwargs(a: int, **rest: int) -> None: ...
def nothing() -> None: ...
def with_context(ctx: JobContext, a: int, b: int = 0) -> None: ...


HANDLERS: list[Callable[..., Any]] = [
    plain,
    defaults,
    keyword_only,
    positional_only,
    star_args,
    star_kwargs,
    nothing,
]
ARGS = [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)]
KWARGS = [{}, {"a": 1}, {"b": 2}, {"c": 3}, {"b": 2, "c": 3}, {"a": 1, "b": 2}, {"z": 0}]


@pytest.mark.parametrize("fn", HANDLERS, ids=lambda f: f.__name__)
def test_refused_exactly_when_bind_refuses(fn: Callable[..., Any]) -> None:
    parameters = Parameters(fn, skip_first=False)
    for args, kwargs in itertools.product(ARGS, KWARGS):
        try:
            inspect.signature(fn).bind(*args, **kwargs)
            fits = True
        except TypeError:
            fits = False
        if fits:
            parameters.check("t", args, kwargs)
        else:
            with pytest.raises(ArgumentValidationError, match="task t: the arguments do not fit"):
                parameters.check("t", args, kwargs)


def test_the_context_parameter_is_left_out() -> None:
    parameters = Parameters(with_context, skip_first=True)
    parameters.check("t", (1,), {})
    parameters.check("t", (), {"a": 1, "b": 2})
    with pytest.raises(ArgumentValidationError, match="missing a required argument: 'a'"):
        parameters.check("t", (), {})
    with pytest.raises(ArgumentValidationError, match="unexpected keyword argument 'ctx'"):
        parameters.check("t", (1,), {"ctx": None})


class Unreadable:
    """A callable whose signature cannot be read."""

    __signature__ = "not a signature"

    def __call__(self, *args: Any, **kwargs: Any) -> None: ...


def test_a_callable_without_a_readable_signature_takes_anything() -> None:
    with pytest.raises(TypeError):
        inspect.signature(Unreadable())
    Parameters(Unreadable(), skip_first=False).check("t", (1, 2, 3), {"x": 0})
