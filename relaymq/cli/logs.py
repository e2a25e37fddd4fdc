"""Log formats of the ``relaymq`` command: plain lines that are never wrapped, or one JSON
object per line. Both carry the job fields the worker attaches to a record (``extra``)."""

from __future__ import annotations

import logging
import time
import warnings
from typing import Any

import orjson

from relaymq.errors import RelayWarning

QUIET_LOGGERS = ("aiormq", "aio_pika")
"""Client libraries whose own records about a failed connection only repeat, before it, the one
line relaymq prints (``cannot reach RabbitMQ at ...``); shown at ``--log-level DEBUG``."""

JOB_FIELDS = ("queue", "job_id", "task", "attempt")
"""Fields the worker attaches to its per-job records."""


def _job_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: getattr(record, k) for k in JOB_FIELDS if getattr(record, k, None) is not None}


class PlainFormatter(logging.Formatter):
    """``2026-12-03 07:00:00 WARNING relaymq.worker: message [queue=q job_id=... ...]``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extra = _job_fields(record)
        if extra:
            first, newline, rest = text.partition("\n")
            tags = " ".join(f"{k}={v}" for k, v in extra.items())
            text = f"{first} [{tags}]{newline}{rest}"
        return text


class JSONFormatter(logging.Formatter):
    """One object per line: time, level, logger, message, the job fields, exception text."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_job_fields(record),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def route_warnings() -> None:
    """Show relaymq's own warnings (``DurabilityWarning``, ``EvictionPolicyWarning``) once each,
    as a log line of the ``relaymq`` logger (their text says what to set), not as a Python
    warning with the library's source line; other warnings are shown as before."""
    warnings.simplefilter("once", RelayWarning)
    original = warnings.showwarning
    if getattr(original, "relaymq", False):  # routed already (main() called again)
        return

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, RelayWarning):
            logging.getLogger("relaymq").warning("%s", message)
        else:
            original(message, category, filename, lineno, file, line)

    show.relaymq = True  # type: ignore[attr-defined]
    warnings.showwarning = show


def quiet_client_libraries(level: str) -> None:
    """Leave connection failures to relaymq's own line (see ``QUIET_LOGGERS``)."""
    if level.upper() != "DEBUG":
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)
