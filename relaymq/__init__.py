"""relaymq: an at-least-once job queue for asyncio Python."""

from relaymq.app import App, limit, schedule, set_default_backend, task
from relaymq.backends import connect
from relaymq.backends.base import Backend
from relaymq.errors import (
    ArgumentValidationError,
    BackendError,
    BackendUnavailableError,
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
from relaymq.job import TERMINAL, Claim, DependencyPolicy, Job, JobState
from relaymq.options import Call
from relaymq.queue import JobHandle, Queue
from relaymq.records.limits import Limits
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
    "Backend",
    "BackendError",
    "BackendUnavailableError",
    "Call",
    "Capabilities",
    "Claim",
    "ConfigError",
    "DependencyPolicy",
    "Event",
    "Flow",
    "Job",
    "JobCancelledError",
    "JobContext",
    "JobExpiredError",
    "JobFailedError",
    "JobHandle",
    "JobNotFoundError",
    "JobState",
    "Limits",
    "Queue",
    "RelayError",
    "RelayWarning",
    "ResultTimeoutError",
    "Schedule",
    "ScheduleNotFoundError",
    "Schedules",
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
