"""Per-job options and one ready-to-enqueue invocation: the leaf of the producer layer.

``task`` holds the defaults and builds ``Call`` values; ``queue`` validates and stores them.
Nothing here imports either, so the two never import each other in a circle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from relaymq.errors import ConfigError
from relaymq.job import DependencyPolicy, KeyMode, KeyRule
from relaymq.retry import DEFAULT_BACKOFF, Backoff

if TYPE_CHECKING:
    from relaymq.backends.base import Backend
    from relaymq.task import Task

R = TypeVar("R")

DEFAULT_QUEUE = "default"
QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,128}$")
MAX_PRIORITY = 255


@dataclass(frozen=True, slots=True)
class Options:
    """Per-job options; a task holds the defaults, ``with_options`` overrides them."""

    queue: str = DEFAULT_QUEUE
    retries: int = 0
    backoff: Backoff | float = DEFAULT_BACKOFF
    ttl: float | None = None
    timeout: float | None = None
    priority: int = 0
    delay: float = 0.0
    job_id: str | None = None
    backend: Backend | None = None
    sandbox: bool = False
    """Run each attempt in a child process of the worker (``relaymq.worker.sandbox``)."""
    throttle: tuple[str, float] | None = None
    """``(key, seconds)``: drop this job while a job of ``key`` is pending in the queue or was
    enqueued less than ``seconds`` ago (answered as a duplicate of that job)."""
    debounce: tuple[str, float] | None = None
    """``(key, seconds)``: replace the pending (waiting or delayed) job of ``key``; this one
    runs ``seconds`` after it was enqueued, so of a burst only the last runs."""
    depends_on: tuple[str, ...] = ()
    """Ids of jobs of the same queue this job waits for (``JobState.BLOCKED`` until each has
    ended); they exist already, or come before it in the same ``add_bulk``."""
    on_dependency_failure: DependencyPolicy = DependencyPolicy.FAIL
    """What the job does when a dependency ends other than completed (``DependencyPolicy``)."""
    limit_key: str | None = None
    """The key its queue's per-key limits count it under (``Limits.key_rate``): a customer,
    an account, an API token."""

    def validate(self) -> None:
        """Raise ``ConfigError`` naming the first invalid option."""
        validate_queue_name(self.queue)
        if self.retries < 0:
            raise ConfigError(f"retries must be >= 0, got {self.retries}")
        if self.delay < 0:
            raise ConfigError(f"delay must be >= 0, got {self.delay}")
        if self.ttl is not None and self.ttl <= 0:
            raise ConfigError(f"ttl must be > 0, got {self.ttl}")
        if self.timeout is not None and self.timeout <= 0:
            raise ConfigError(f"timeout must be > 0, got {self.timeout}")
        if not 0 <= self.priority <= MAX_PRIORITY:
            raise ConfigError(f"priority must be between 0 and {MAX_PRIORITY}, got {self.priority}")
        if self.job_id is not None and not 0 < len(self.job_id) <= 255:
            raise ConfigError("job_id must be 1 to 255 characters")
        if self.throttle is not None and self.debounce is not None:
            raise ConfigError("a job is throttled or debounced, not both")
        for name, rule in (("throttle", self.throttle), ("debounce", self.debounce)):
            if rule is None:
                continue
            if not (isinstance(rule, tuple) and len(rule) == 2 and isinstance(rule[0], str)
                    and isinstance(rule[1], int | float)):  # fmt: skip
                raise ConfigError(f"{name} must be (key, seconds), got {rule!r}")
            if not 0 < len(rule[0]) <= 255 or not rule[1] > 0:
                raise ConfigError(f"{name}: the key must be 1 to 255 characters and the "
                                  f"seconds positive, got {rule!r}")  # fmt: skip
        if self.debounce is not None and self.delay:
            raise ConfigError("debounce sets the delay itself: give no delay with it")
        if self.depends_on:
            if not all(isinstance(d, str) and 0 < len(d) <= 255 for d in self.depends_on):
                raise ConfigError(f"depends_on takes job ids or handles, got {self.depends_on!r}")
            if self.delay or self.throttle is not None or self.debounce is not None:
                raise ConfigError("a job with depends_on starts when its dependencies end: "
                                  "give it no delay, throttle or debounce")  # fmt: skip
        if self.limit_key is not None and not (
            isinstance(self.limit_key, str) and 0 < len(self.limit_key) <= 255
            and self.limit_key.split() == [self.limit_key]
        ):  # fmt: skip
            raise ConfigError("limit_key must be 1 to 255 characters without spaces, "
                              f"got {self.limit_key!r}")  # fmt: skip
        if not isinstance(self.on_dependency_failure, DependencyPolicy):
            raise ConfigError("on_dependency_failure must be 'fail', 'ignore' or 'include', "
                              f"got {self.on_dependency_failure!r}")  # fmt: skip

    def rule(self) -> KeyRule | None:
        """The ``KeyRule`` of ``throttle`` or ``debounce``, if either is set."""
        if self.throttle is not None:
            return KeyRule(self.throttle[0], KeyMode.THROTTLE, float(self.throttle[1]))
        if self.debounce is not None:
            return KeyRule(self.debounce[0], KeyMode.DEBOUNCE)
        return None

    def start_delay(self) -> float:
        """Seconds until a new job is eligible: ``delay``, or a debounce's seconds."""
        return float(self.debounce[1]) if self.debounce is not None else self.delay


def validate_queue_name(name: str) -> str:
    if not QUEUE_NAME.match(name):
        raise ConfigError(f"invalid queue name {name!r}: use 1-128 letters, digits and _ . : @ -")
    return name


@dataclass(slots=True)
class Call(Generic[R]):
    """One invocation of a task, ready to enqueue (``Queue.add`` / ``Queue.add_bulk``)."""

    task: Task[Any, R]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    options: Options
