"""Every exception relaymq raises, in one tree.

::

    RelayError
    ├── ConfigError                 bad settings, options or URLs (UnknownBackendError)
    │   └── UnknownBackendError     a URL scheme no backend handles; lists the supported ones
    ├── SerializationError          arguments or results that cannot be encoded or decoded
    │   ├── PayloadTooLargeError    a payload over ``Settings.max_payload_bytes``
    │   └── ArgumentValidationError arguments that do not fit the task's signature, or one that
    │                               does not validate against its pydantic type
    ├── BackendError                the backend failed; the driver's exception is ``__cause__``
    │   ├── BackendUnavailableError the server cannot be reached (connection refused, timeout)
    │   ├── CorruptRecordError      a stored record cannot be read back
    │   └── RecordRefusedError      the backend refuses a record as it is (over its size
    │                               limit): the same write can never succeed
    ├── JobNotFoundError            no such job in that queue
    ├── ClaimLostError              ``JobContext.complete_in``: this attempt's claim is lost
    ├── ScheduleNotFoundError       no schedule with that id
    ├── ResultTimeoutError          ``JobHandle.result(timeout=)`` passed; says the job's state
    ├── TaskNotFoundError           a job names a task this process cannot import
    └── JobFailedError              ``JobHandle.result()`` of a failed/expired/cancelled job
        ├── JobCancelledError
        └── JobExpiredError

``ResultTimeoutError`` is also a ``TimeoutError``, so ``except TimeoutError`` still catches it.

Warnings: ``RelayWarning`` (a ``UserWarning``), with ``EvictionPolicyWarning`` for a Redis
server that may evict keys and ``DurabilityWarning`` for one that keeps nothing on disk, both
of which would lose jobs.
"""

from __future__ import annotations


class RelayError(Exception):
    """Base class of every relaymq error."""


class ConfigError(RelayError, ValueError):
    """Invalid settings, job options, queue names or URLs."""


class UnknownBackendError(ConfigError):
    """A backend URL whose scheme no backend handles."""


class SerializationError(RelayError, ValueError):
    """Arguments or a result that the serializer cannot encode, or a payload it cannot decode."""


class PayloadTooLargeError(SerializationError):
    """A serialized payload larger than the configured maximum."""


class ArgumentValidationError(SerializationError):
    """Arguments that do not fit the task's signature (missing, unexpected or too many), or
    one that does not validate against the pydantic annotation of its parameter. Raised when
    the job is made (``enqueue``, ``Queue.add``, a schedule's definition): nothing is stored.
    The message names the task and the argument."""


class BackendError(RelayError):
    """The backend failed to do what was asked; the driver's exception is the ``__cause__``."""


class BackendUnavailableError(BackendError, ConnectionError):
    """The backend's server cannot be reached right now; retrying later may succeed."""


class CorruptRecordError(BackendError):
    """A stored record could not be read back."""


class RecordRefusedError(BackendError):
    """The backend refused to store a record as it is (MongoDB: a document over its 16 MiB
    limit), whatever the server's state: unlike other backend errors, the same write cannot
    succeed on a retry. A worker whose outcome is refused writes a failed attempt instead, with
    this error's message as the reason."""


class JobNotFoundError(RelayError, LookupError):
    """No job with that id exists in that queue."""


class ClaimLostError(RelayError):
    """``JobContext.complete_in`` found that this attempt no longer holds its job (recovered
    as stalled and claimed again, cancelled or removed): nothing was written, and the caller's
    transaction, which this exception leaves, must not commit the handler's work either."""


class ResultTimeoutError(RelayError, TimeoutError):
    """``JobHandle.result(timeout=...)`` gave up; the message says where the job stands.

    ``state`` is the job's state when the deadline passed (None when it could not be read).
    """

    def __init__(self, message: str, job_id: str, queue: str, state: str | None) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.queue = queue
        self.state = state


class TaskNotFoundError(RelayError, LookupError):
    """A job names a task that is neither registered nor importable in this process."""


class JobFailedError(RelayError):
    """The job ended without a result; ``error`` carries the stored reason."""

    def __init__(self, job_id: str, state: str, error: str | None) -> None:
        super().__init__(f"job {job_id} ended {state}: {error or 'no error recorded'}")
        self.job_id = job_id
        self.state = state
        self.error = error


class JobCancelledError(JobFailedError):
    """The job was cancelled."""


class JobExpiredError(JobFailedError):
    """The job's TTL passed before it could run."""


class RelayWarning(UserWarning):
    """Base category of relaymq's warnings."""


class EvictionPolicyWarning(RelayWarning):
    """The Redis server may evict keys under memory pressure, which would lose jobs."""


class DurabilityWarning(RelayWarning):
    """The server keeps nothing on disk (Redis ``appendonly no``): a restart loses every job."""


class ScheduleNotFoundError(RelayError, LookupError):
    """No schedule with that id is stored."""
