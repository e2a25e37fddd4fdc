"""pydantic models as task arguments and results (``pip install 'relaymq[pydantic]'``).

A task whose parameters or return value are annotated with pydantic models (``BaseModel``, also
inside ``list[...]``, ``X | None``...) gets them validated and turned into JSON-able values when
a job is made, so an argument that does not validate is an ``ArgumentValidationError`` at
enqueue and nothing is stored; the worker validates them back into models before calling the
handler, and the handler's model result is stored as JSON and read back as the model by
``JobHandle.result()``. Tasks without models never touch pydantic.
"""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Callable
from typing import Any

from relaymq.errors import ArgumentValidationError, SerializationError


class Models:
    """The pydantic adapters of one task: per parameter (by name) and for its result."""

    def __init__(
        self, signature: inspect.Signature, params: dict[str, Any], result: Any | None
    ) -> None:
        self.signature = signature
        self.params = params
        self.result = result

    def dump_args(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        """Validate the arguments given at enqueue and make them JSON-able."""
        return self._convert(args, kwargs, dump=True)

    def load_args(
        self, args: list[Any], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        """The worker's side: validate stored arguments back into models."""
        return self._convert(tuple(args), kwargs, dump=False)

    def dump_result(self, value: Any) -> Any:
        if self.result is None:
            return value
        return self.result.dump_python(value, mode="json")

    def load_result(self, value: Any) -> Any:
        if self.result is None or value is None:
            return value
        return self.result.validate_python(value)

    def _convert(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], *, dump: bool
    ) -> tuple[list[Any], dict[str, Any]]:
        from pydantic import ValidationError

        try:
            bound = self.signature.bind_partial(*args, **kwargs)
        except TypeError as e:
            raise ArgumentValidationError(f"arguments do not fit the task's signature: {e}") from e
        for name, value in bound.arguments.items():
            adapter = self.params.get(name)
            if adapter is None:
                continue
            try:
                model = adapter.validate_python(value)
                bound.arguments[name] = adapter.dump_python(model, mode="json") if dump else model
            except ValidationError as e:
                raise ArgumentValidationError(
                    f"argument {name!r} does not validate: {e}".replace("\n", " ")
                ) from e
        return list(bound.args), dict(bound.kwargs)


def models_of(fn: Callable[..., Any], skip_first: bool) -> Models | None:
    """The adapters of ``fn``'s model annotations; None when it has none (then pydantic is not
    even imported). ``skip_first``: the first parameter is the ``JobContext``."""
    if "pydantic" not in sys.modules:  # no model can have been defined without it
        return None
    from pydantic import BaseModel, TypeAdapter

    try:
        hints = typing.get_type_hints(fn)
    except Exception as e:  # an annotation that does not resolve: say which task
        raise SerializationError(f"cannot read the annotations of {fn.__qualname__}: {e}") from e
    signature = inspect.signature(fn)
    params = list(signature.parameters.values())[1 if skip_first else 0 :]
    adapters = {
        p.name: TypeAdapter(hints[p.name])
        for p in params
        if p.name in hints and _mentions(hints[p.name], BaseModel)
    }
    returned = hints.get("return")
    result = (
        TypeAdapter(returned) if returned is not None and _mentions(returned, BaseModel) else None
    )
    if not adapters and result is None:
        return None
    return Models(signature.replace(parameters=params), adapters, result)


def _mentions(annotation: Any, base: type) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, base):
        return True
    return any(_mentions(a, base) for a in typing.get_args(annotation))
