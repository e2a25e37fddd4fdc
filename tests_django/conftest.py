"""Django configured for these tests before any task is defined (Django validates a task
against its backend when it is decorated). Django's own database is relaymq's backend too, so
``transaction.atomic()`` blocks take the jobs with the data: a fresh SQLite file by default, or
with ``RELAYMQ_DJANGO_DB=postgres`` a fresh database on the PostgreSQL server of
``RELAYMQ_TEST_POSTGRES`` (default 127.0.0.1:5432), dropped when the run ends."""

from __future__ import annotations

import atexit
import os
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import django
from django.conf import settings

ENGINE = os.environ.get("RELAYMQ_DJANGO_DB", "sqlite")


def _sqlite() -> tuple[dict[str, Any], str]:
    db = Path(tempfile.mkdtemp(prefix="relaymq-django-")) / "tasks.db"
    return {"ENGINE": "django.db.backends.sqlite3", "NAME": str(db)}, f"sqlite:///{db}"


def _postgres() -> tuple[dict[str, Any], str]:
    import psycopg

    server = os.environ.get("RELAYMQ_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")
    name = f"relaymq_django_{os.getpid()}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as con:
        con.execute(f'DROP DATABASE IF EXISTS "{name}"')
        con.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        from django.db import connections
        from django.tasks import task_backends

        # relaymq's own pool first: left open, it would try to reconnect to the dropped
        # database and log each failure
        task_backends.close_all()
        connections.close_all()
        with psycopg.connect(f"{server}/postgres", autocommit=True) as con:
            con.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    atexit.register(drop)
    parts = urlsplit(server)
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": parts.username or "postgres",
        "HOST": parts.hostname or "127.0.0.1",
        "PORT": str(parts.port or 5432),
    }
    return database, f"{server}/{name}?migrate=true"


if ENGINE not in ("sqlite", "postgres"):
    raise SystemExit(f"RELAYMQ_DJANGO_DB={ENGINE!r}: sqlite or postgres")
DATABASE, URL = _sqlite() if ENGINE == "sqlite" else _postgres()

settings.configure(
    INSTALLED_APPS=["relaymq.contrib.django", "tests_django"],  # djtasks: a project app's
    USE_TZ=True,
    DATABASES={"default": DATABASE},
    TASKS={
        "default": {
            "BACKEND": "relaymq.contrib.django.RelayMQBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"URL": URL},
        }
    },
)
django.setup()
