"""Settings, with the seed's names; every field has a ``RELAYMQ_<NAME>`` environment twin."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from relaymq.errors import ConfigError

DEFAULT_BACKEND_URL = "sqlite:///relaymq.db"


@dataclass(frozen=True, slots=True)
class Settings:
    backend: str = DEFAULT_BACKEND_URL
    """Backend URL (``RELAYMQ_BACKEND``)."""
    concurrency: int = 10
    """Jobs one worker runs at once."""
    enable_stalled_check: bool = True
    """Run stalled recovery in this worker (elected per queue through the backend's lock)."""
    enable_scheduler: bool = True
    """Take part in the election of the process that fires schedules (``relaymq.schedules``),
    after storing the code-defined schedules of this worker's queues."""
    stalled_threshold: float = 30.0
    """Seconds without a heartbeat after which an active job counts as stalled."""
    heartbeat_interval: float = 5.0
    """Seconds between heartbeats; must be well inside ``stalled_threshold``."""
    stalled_check_interval: float = 10.0
    """Seconds between stalled-recovery passes."""
    shutdown_timeout: float = 10.0
    """Seconds a stopping worker waits for running jobs before releasing their claims."""
    max_stalled: int = 3
    """Recoveries a job may go through before it fails into the DLQ (poison-job guard)."""
    max_blocked: float = 300.0
    """Seconds a handler may block the worker's event loop while its claims are renewed from
    a thread of their own; past that they are left to stalled recovery. 0: no such thread."""
    max_payload_bytes: int = 1024 * 1024
    """Largest serialized job payload accepted at enqueue (below every backend's own limit)."""
    max_result_bytes: int = 1024 * 1024
    """Largest serialized result a job may store: a larger one fails the attempt (retried by the
    task's policy) with an error naming both sizes (below every backend's own limit)."""
    history_flush_interval: float = 5.0
    """Seconds between two writes of a worker's outcome counts to the backend's per-minute
    history (the dashboard's charts); 0 records no history."""
    retention_interval: float = 60.0
    """Seconds between two retention passes over one queue by its elected maintenance
    (``relaymq.retention``: finished jobs past their queue's retention are deleted)."""
    history_retention: float = 7 * 86400.0
    """Seconds of history kept; older minutes are pruned by the elected maintenance."""
    attempt_history: int = 20
    """Attempts a job keeps in its history (``Job.attempt_history``: when each ran, where, for
    how long, and its error), the newest; 0 records none."""
    import_prefixes: tuple[str, ...] = ()
    """Modules (or packages) a worker may import because a job names a task in them that is
    not registered yet (``RELAYMQ_IMPORT_PREFIXES=app.tasks,billing``). Empty by default: a
    worker runs only the tasks of the module it was started with, since whoever can write a
    job to the backend chooses its task name."""

    memory_trim_interval: float = 60.0
    """Seconds between two times a worker asks glibc to give back the memory Python freed
    (``malloc_trim``), which it otherwise keeps, so that RSS climbs in steps after bursts
    such as reconnects; 0: never. Nothing is done on other C libraries."""

    connect_timeout: float = 60.0
    """Seconds a starting worker waits for a backend that cannot be reached yet (refused
    connections, a server starting up or in recovery), trying again with backoff; 0: fail at
    once. Admin commands never wait."""

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ConfigError("concurrency must be at least 1")
        if self.stalled_threshold <= 0 or self.heartbeat_interval <= 0:
            raise ConfigError("stalled_threshold and heartbeat_interval must be positive")
        if self.heartbeat_interval * 2 > self.stalled_threshold:
            raise ConfigError(
                f"heartbeat_interval ({self.heartbeat_interval}s) must be at most half of "
                f"stalled_threshold ({self.stalled_threshold}s), or live jobs look stalled"
            )
        if self.stalled_check_interval <= 0 or self.shutdown_timeout < 0:
            raise ConfigError("stalled_check_interval must be positive, shutdown_timeout >= 0")
        if self.max_stalled < 0 or self.max_payload_bytes < 1 or self.max_blocked < 0:
            raise ConfigError("max_stalled and max_blocked must be >= 0, max_payload_bytes >= 1")
        if self.max_result_bytes < 1:
            raise ConfigError(f"max_result_bytes must be >= 1, not {self.max_result_bytes}")
        if self.retention_interval <= 0:
            raise ConfigError("retention_interval must be positive")
        if self.history_flush_interval < 0 or self.history_retention <= 0:
            raise ConfigError("history_flush_interval must be >= 0, history_retention positive")
        if self.connect_timeout < 0 or self.memory_trim_interval < 0:
            raise ConfigError("connect_timeout and memory_trim_interval must be >= 0")
        if self.attempt_history < 0:
            raise ConfigError(f"attempt_history must be >= 0, not {self.attempt_history}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults, then ``RELAYMQ_*`` variables, then ``overrides`` (None values ignored)."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"RELAYMQ_{f.name.upper()}")
            if raw is not None:
                values[f.name] = _parse(f.name, f.type, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)


def _parse(name: str, kind: object, raw: str) -> Any:
    try:
        if kind in (bool, "bool"):
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if kind in (int, "int"):
            return int(raw)
        if kind in (float, "float"):
            return float(raw)
        if kind in (tuple[str, ...], "tuple[str, ...]"):
            return tuple(part.strip() for part in raw.split(",") if part.strip())
        return raw
    except ValueError as e:
        raise ConfigError(f"RELAYMQ_{name.upper()}={raw!r} is not a valid {kind}") from e
