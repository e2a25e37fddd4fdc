from __future__ import annotations

import pytest

import relaymq
from relaymq import ConfigError, Queue
from relaymq.app import default_app
from relaymq.backends import backend_class, connect
from relaymq.backends.memory import InMemoryBackend
from relaymq.errors import UnknownBackendError
from relaymq.task import TaskNotFoundError
from tests import tasks

PUBLIC = [
    "TERMINAL",
    "App",
    "ArgumentValidationError",
    "Attempt",
    "Backend",
    "BackendError",
    "BackendUnavailableError",
    "Call",
    "Capabilities",
    "Claim",
    "ClaimLostError",
    "ConfigError",
    "DependencyPolicy",
    "Event",
    "Flow",
    "Job",
    "JobCancelledError",
    "JobContext",
    "JobExpiredError",
    "JobFailedError",
    "JobFilter",
    "JobHandle",
    "JobNotFoundError",
    "JobState",
    "Limits",
    "Queue",
    "RelayError",
    "RelayWarning",
    "ResultTimeoutError",
    "Retention",
    "Schedule",
    "ScheduleNotFoundError",
    "Schedules",
    "SequenceFailure",
    "SerializationError",
    "Settings",
    "Task",
    "TaskNotFoundError",
    "Worker",
    "connect",
    "exponential",
    "fixed",
    "limit",
    "schedule",
    "set_default_backend",
    "task",
]
"""The public surface: a name added or removed here is a decision, not an accident."""


def test_public_surface_is_exactly_the_pinned_names_sorted_and_importable() -> None:
    assert relaymq.__all__ == PUBLIC

    # isort-style, as ruff keeps it: CONSTANTS, then Classes, then functions
    def order(name: str) -> tuple[int, str]:
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert PUBLIC == sorted(PUBLIC, key=order)
    for name in PUBLIC:
        assert getattr(relaymq, name) is not None
    public = {n for n in vars(relaymq) if not n.startswith("_")}
    assert public - set(PUBLIC) <= {"annotations"} | {  # submodules, not re-exports
        n for n in public if type(getattr(relaymq, n)).__name__ == "module"
    }


def test_unknown_scheme_lists_the_supported_ones() -> None:
    with pytest.raises(UnknownBackendError) as e:
        backend_class("mysql://localhost/db")
    for scheme in ("memory://", "sqlite://", "redis://", "postgresql://", "mongodb://", "amqp://"):
        assert scheme in str(e.value)
    with pytest.raises(UnknownBackendError):
        backend_class("not a url")


async def test_connect_memory() -> None:
    backend = await connect("memory://")
    assert isinstance(backend, InMemoryBackend)


def test_task_names_default_to_import_path_and_resolve() -> None:
    assert tasks.add.name == "tests.tasks:add"
    assert default_app().tasks["tests.tasks:add"] is tasks.add
    assert default_app().resolve("tests.tasks:add") is tasks.add
    assert tasks.blocking_sleep(0) == 0  # still a plain callable


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("tests.nowhere:thing", "cannot import"),
        ("tests.tasks:LEDGER", "no @task"),
        ("bare_name", "not registered"),
    ],
)
def test_unknown_tasks_are_named_in_the_error(name: str, match: str) -> None:
    """``import_task`` (a name written in code) imports the module; ``resolve`` (a stored
    job's name) never does: for it every unregistered name is just not registered."""
    with pytest.raises(TaskNotFoundError, match=match) as e:
        default_app().import_task(name)
    assert name in str(e.value)
    with pytest.raises(TaskNotFoundError, match="not registered") as e:
        default_app().resolve(name)
    assert name in str(e.value)


def test_context_parameter_is_detected() -> None:
    assert tasks.with_context.takes_context
    assert not tasks.add.takes_context


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"delay": -1}, "delay"),
        ({"ttl": 0}, "ttl"),
        ({"timeout": -2}, "timeout"),
        ({"priority": 999}, "priority"),
        ({"job_id": "x" * 300}, "job_id"),
    ],
)
async def test_invalid_options_are_rejected_at_enqueue(
    options: dict[str, float], match: str
) -> None:
    queue = Queue("opts", InMemoryBackend())
    with pytest.raises(ConfigError, match=match):
        await queue.add(tasks.add.with_options(**options).call(1, 2))  # type: ignore[arg-type]
    assert sum((await queue.counts()).values()) == 0


@pytest.mark.parametrize("name", ["", "has space", "{braces}", "x" * 129])
def test_bad_queue_names(name: str) -> None:
    with pytest.raises(ConfigError, match="queue name"):
        Queue(name, InMemoryBackend())
