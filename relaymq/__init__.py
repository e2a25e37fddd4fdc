"""relaymq: an at-least-once job queue for asyncio Python."""

from relaymq.app import App, limit, schedule, set_default_backend, task
from relaymq.backends import connect
from relaymq.backends.base import Backend
from relaymq.errors import (
    ArgumentValidationError,
    BackendError,
    BackendUnavailableError,
    ClaimLostError,
    ConfigError,
    JobCancelledError,
    JobExpiredError,
    JobFailedError,
    JobNotFoundError,
    RelayError,
    RelayWarning,
    ResultTimeoutError,
    ScheduleNotFoundError,
    SerializationError,
    TaskNotFoundError,
)
from relaymq.events import Event
from relaymq.flows import Flow
from relaymq.job import (
    TERMINAL,
    Attempt,
    Claim,
    DependencyPolicy,
    Job,
    JobState,
    SequenceFailure,
)
from relaymq.options import Call
from relaymq.queue import JobHandle, Queue
from relaymq.records.limits import Limits
from relaymq.records.retention import Retention
from relaymq.records.search import JobFilter
from relaymq.records.store import Capabilities
from relaymq.retry import exponential, fixed
from relaymq.schedules import Schedule, Schedules
from relaymq.settings import Settings
from relaymq.task import JobContext, Task
from relaymq.worker import Worker

__all__ = [
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
