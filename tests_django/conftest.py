"""Django configured for these tests before any task is defined (Django validates a task
against its backend when it is decorated): relaymq's backend on a fresh SQLite file."""

from __future__ import annotations

import tempfile
from pathlib import Path

import django
from django.conf import settings

DB = Path(tempfile.mkdtemp(prefix="relaymq-django-")) / "tasks.db"

settings.configure(
    INSTALLED_APPS=["relaymq.contrib.django", "tests_django"],  # djtasks: a project app's
    USE_TZ=True,
    TASKS={
        "default": {
            "BACKEND": "relaymq.contrib.django.RelayMQBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"URL": f"sqlite:///{DB}"},
        }
    },
)
django.setup()
