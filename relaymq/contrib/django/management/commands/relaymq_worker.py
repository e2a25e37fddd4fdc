"""``python manage.py relaymq_worker``: a relaymq worker for a Django project's task backend."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.tasks import task_backends

import relaymq
from relaymq.app import default_app
from relaymq.contrib.django import RelayMQBackend
from relaymq.testing import drain


class Command(BaseCommand):
    help = (
        "Run the queues of a relaymq task backend until SIGTERM/SIGINT (or, --drain, until idle)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--backend", default="default", help="The TASKS alias (default).")
        parser.add_argument("--concurrency", type=int, default=None, help="Jobs run at once.")
        parser.add_argument(
            "--drain", action="store_true", help="Stop once nothing is left to run (for tests)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        backend = task_backends[options["backend"]]
        if not isinstance(backend, RelayMQBackend):
            raise CommandError(f"TASKS[{options['backend']!r}] is not a RelayMQBackend")
        settings = relaymq.Settings.from_env()
        if options["concurrency"]:
            settings = settings.replace(concurrency=options["concurrency"])
        queues = sorted(backend.queues)
        asyncio.run(self._work(backend.url, queues, settings, options["drain"]))

    async def _work(
        self, url: str, queues: list[str], settings: relaymq.Settings, until_idle: bool
    ) -> None:
        app = default_app().on(url)  # the default app holds the task that runs Django's
        await app.connect()
        try:
            if until_idle:
                done = await drain(app, queues, settings=settings)
                self.stdout.write(
                    f"ran {done.completed + done.failed} tasks ({done.failed} failed)"
                )
                return
            worker = relaymq.Worker(app, queues, settings=settings)
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, worker.stop)
            await worker.run()
        finally:
            await app.close()
