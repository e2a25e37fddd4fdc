"""Jobs that wait for other jobs: ``depends_on``, and flows (a parent with children, nested).

A flow is enqueued in one batch, children first, so every job depends only on jobs stored
before it: a cycle cannot be written down. The backend keeps each waiting job ``blocked`` and
makes it due when its last dependency ends, in the same atomic step as that end
(``Backend.enqueue`` says how; ``docs/flows.md`` says what it means for users).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from relaymq.errors import ConfigError
from relaymq.job import DependencyPolicy, NewJob
from relaymq.options import Call


def dependency_ids(deps: Iterable[Any]) -> tuple[str, ...]:
    """Job ids from ids or handles (anything with an ``id``), in the order given."""
    if isinstance(deps, str):
        raise ConfigError(f"depends_on takes a list of job ids or handles, not the string {deps!r}")
    return tuple(d if isinstance(d, str) else getattr(d, "id", d) for d in deps)


def dependency_policy(value: str | DependencyPolicy) -> DependencyPolicy:
    try:
        return DependencyPolicy(value)
    except ValueError:
        raise ConfigError(
            f"on_dependency_failure must be 'fail', 'ignore' or 'include', got {value!r}"
        ) from None


@dataclass(frozen=True)
class Flow:
    """A parent job that runs once every child has ended; a child may be a flow itself.

    ``Queue.add_flow(Flow(report.call(month), [fetch.call(a), fetch.call(b)]))`` stores the
    children and the parent in one batch. The parent sees its children's results in
    ``JobContext.results``. ``on_failure`` is the parent's ``DependencyPolicy``: ``"fail"``
    (a child that did not complete fails the parent, and so on up), ``"ignore"`` (it runs
    anyway, with the results of those that completed) or ``"include"`` (as ignore, and
    ``JobContext.failed`` says which did not complete, and why).
    """

    parent: Call[Any]
    children: Sequence[Call[Any] | Flow] = field(default_factory=tuple)
    on_failure: str = "fail"

    def calls(self) -> list[Call[Any]]:
        """Every call of the flow in enqueue order (children before their parent), each with
        its job id set and the parent's ``depends_on`` naming its children."""
        out: list[Call[Any]] = []
        self._flatten(out)
        return out

    def _flatten(self, out: list[Call[Any]]) -> str:
        if not self.children:
            raise ConfigError("a flow needs at least one child")
        child_ids = [
            c._flatten(out) if isinstance(c, Flow) else _with_id(c, out) for c in self.children
        ]
        parent = self.parent
        options = dataclasses.replace(
            parent.options,
            job_id=parent.options.job_id or os.urandom(16).hex(),
            depends_on=(*parent.options.depends_on, *child_ids),
            on_dependency_failure=dependency_policy(self.on_failure),
        )
        out.append(dataclasses.replace(parent, options=options))
        assert options.job_id is not None
        return options.job_id


def _with_id(call: Call[Any], out: list[Call[Any]]) -> str:
    job_id = call.options.job_id or os.urandom(16).hex()
    out.append(dataclasses.replace(call, options=dataclasses.replace(call.options, job_id=job_id)))
    return job_id


def check_order(jobs: Sequence[NewJob]) -> list[str]:
    """Check the batch's dependencies before anything is stored: a job depends neither on
    itself nor on a job after it in the batch (which is how a cycle would be written).
    Returns the ids it depends on that the batch does not hold (they must exist already)."""
    seen: set[str] = set()
    later = {j.id for j in jobs}
    outside: list[str] = []
    for j in jobs:
        for dep in j.depends_on:
            if dep == j.id:
                raise ConfigError(f"job {j.id!r} depends on itself")
            if dep not in seen:
                if dep in later:
                    raise ConfigError(
                        f"job {j.id!r} depends on {dep!r}, which comes after it in the batch: "
                        "a job can only wait for jobs enqueued before it (so no cycle forms)"
                    )
                outside.append(dep)
        seen.add(j.id)
    return list(dict.fromkeys(outside))
