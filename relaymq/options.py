"""Per-job options and one ready-to-enqueue invocation: the leaf of the producer layer.

``task`` holds the defaults and builds ``Call`` values; ``queue`` validates and stores them.
Nothing here imports either, so the two never import each other in a circle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from relaymq.errors import ConfigError
from relaymq.job import MAX_PRIORITY, DependencyPolicy, KeyMode, KeyRule, SequenceFailure
from relaymq.retry import DEFAULT_BACKOFF, Backoff

if TYPE_CHECKING:
    from relaymq.backends.base import Backend
    from relaymq.models import Models

R = TypeVar("R")

DEFAULT_QUEUE = "default"
QUEUE_NAME = re.compile(r"[A-Za-z0-9_.:@-]{1,128}")
"""A whole queue name (applied with ``fullmatch``: ``$`` would also pass a final newline)."""
MAX_ID = 255
"""Most characters in a job id, a throttle, debounce or limit key."""
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
"""Control characters (C0, DEL, C1): refused in ids, names and keys, which reach log lines,
terminals and every backend (a newline would forge a log line; PostgreSQL refuses a NUL)."""


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
    sequence: str | None = None
    """The jobs of one sequence of the queue (``"customer:42"``) run one at a time, in
    enqueue order; a dead-lettered one holds the sequence until it is retried, cancelled or
    removed, unless ``sequence_on_failure`` is ``continue``."""
    sequence_on_failure: SequenceFailure = SequenceFailure.HOLD
    connection: Any = None
    """The caller's database connection (or SQLAlchemy session) whose open transaction the
    job is written in: it exists if and only if that transaction commits (docs/transactions.md)."""

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
        if self.job_id is not None:
            check_text(self.job_id, "job_id")
        if self.throttle is not None and self.debounce is not None:
            raise ConfigError("a job is throttled or debounced, not both")
        for name, rule in (("throttle", self.throttle), ("debounce", self.debounce)):
            if rule is None:
                continue
            if not (
                isinstance(rule, tuple)
                and len(rule) == 2
                and isinstance(rule[0], str)
                and isinstance(rule[1], int | float)
            ):
                raise ConfigError(f"{name} must be (key, seconds), got {_shown(rule)}")
            check_text(rule[0], f"{name} key")
            if not rule[1] > 0:
                raise ConfigError(f"{name} needs its seconds positive, got {rule!r}")
        if self.debounce is not None and self.delay:
            raise ConfigError("debounce sets the delay itself: give no delay with it")
        if self.depends_on:
            for d in self.depends_on:
                check_text(d, "depends_on id")
            if self.delay or self.throttle is not None or self.debounce is not None:
                raise ConfigError(
                    "a job with depends_on starts when its dependencies end: "
                    "give it no delay, throttle or debounce"
                )
        if self.limit_key is not None and (
            check_text(self.limit_key, "limit_key").split() != [self.limit_key]
        ):
            raise ConfigError(f"limit_key must have no spaces, got {self.limit_key!r}")
        if self.sequence is not None:
            check_text(self.sequence, "sequence")
            if self.depends_on:
                raise ConfigError(
                    "a job of a sequence runs when the jobs before it in the sequence ended: "
                    "give it no depends_on (the sequence already orders it)"
                )
            if self.debounce is not None:
                raise ConfigError(
                    "a job of a sequence keeps its place in the sequence: it cannot be "
                    "debounced (a debounce deletes the waiting job it replaces)"
                )
        if not isinstance(self.sequence_on_failure, SequenceFailure):
            raise ConfigError(
                "sequence_on_failure must be 'hold' or 'continue', "
                f"got {_shown(self.sequence_on_failure)}"
            )
        if not isinstance(self.on_dependency_failure, DependencyPolicy):
            raise ConfigError(
                "on_dependency_failure must be 'fail', 'ignore' or 'include', "
                f"got {self.on_dependency_failure!r}"
            )

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


def sequence_policy(value: str | SequenceFailure) -> SequenceFailure:
    """``value`` as a ``SequenceFailure``; ``ConfigError`` when it is none."""
    try:
        return SequenceFailure(value)
    except ValueError:
        raise ConfigError(
            f"sequence_on_failure must be 'hold' or 'continue', got {_shown(value)}"
        ) from None


def validate_queue_name(name: str) -> str:
    """``name`` when it is a valid queue name; else ``ConfigError`` saying why."""
    if not isinstance(name, str):
        raise ConfigError(f"queue name must be a str, got {_shown(name)}")
    if not QUEUE_NAME.fullmatch(name):
        raise ConfigError(f"invalid queue name {name!r}: use 1-128 letters, digits and _ . : @ -")
    return name


def check_text(value: str, what: str, *, max_length: int | None = MAX_ID) -> str:
    """``value`` when it is a ``str`` of 1 to ``max_length`` characters (None: any number)
    without control characters: what every id, name and key must be before it reaches a
    backend (a MongoDB filter would read a dict as operators) or a log line. Else
    ``ConfigError`` naming ``what``."""
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a str, got {_shown(value)}")
    if not value or (max_length is not None and len(value) > max_length):
        limit = "1 or more" if max_length is None else f"1 to {max_length}"
        raise ConfigError(f"{what} must be {limit} characters, got {len(value)}")
    if CONTROL.search(value):
        raise ConfigError(
            f"{what} {value!r} holds a control character (such as a newline, "
            "tab, ESC or NUL), which ids, names and keys may not"
        )
    return value


def _shown(value: object) -> str:
    """A caller's value in an error message: its type and a bounded repr."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 80 else text[:77] + '...'}"


class Callee(Protocol):
    """What a ``Call`` needs of its task (``relaymq.task.Task`` is one): its name, its argument
    check and its models."""

    @property
    def name(self) -> str: ...

    @property
    def models(self) -> Models | None: ...

    def check_arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None: ...


@dataclass(slots=True)
class Call(Generic[R]):
    """One invocation of a task, ready to enqueue (``Queue.add`` / ``Queue.add_bulk``)."""

    task: Callee
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    options: Options
