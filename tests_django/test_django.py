"""relaymq as a Django 6 Tasks backend, tested against Django itself: enqueue, the worker
command, results, priorities, delays, context, async tasks and failures."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import TaskResultDoesNotExist
from django.utils import timezone

import relaymq
from relaymq.app import default_app
from relaymq.contrib.django import RUNNER, RelayMQBackend
from tests_django import djtasks


def drain() -> None:
    call_command("relaymq_worker", "--drain")


def test_the_backend_is_relaymq() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, RelayMQBackend)
    assert backend.supports_defer and backend.supports_get_result and backend.supports_priority


def test_enqueue_run_and_read_the_result() -> None:
    result = djtasks.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY and result.args == [2, 3]
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5
    assert result.attempts == 1 and result.finished_at is not None
    again = djtasks.add.get_result(result.id)
    assert again.return_value == 5 and again.task.name == "add"


def test_context_async_and_other_queues() -> None:
    ctx = djtasks.where.enqueue("t")
    doubled = djtasks.async_double.enqueue(21)
    loud = djtasks.shout.enqueue("hi")
    drain()
    for r in (ctx, doubled, loud):
        r.refresh()
    assert ctx.return_value == {"tag": "t", "id": ctx.id, "attempt": 1}
    assert doubled.return_value == 42 and loud.return_value == "HI"


def test_priorities_run_higher_first() -> None:
    low = djtasks.add.using(priority=-10).enqueue(1, 0)
    high = djtasks.add.using(priority=90).enqueue(2, 0)
    drain()
    low.refresh()
    high.refresh()
    assert high.started_at is not None and low.started_at is not None
    assert high.started_at <= low.started_at


def test_run_after_waits() -> None:
    later = djtasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1)
    drain()
    later.refresh()
    assert later.status == TaskResultStatus.READY  # not due: not run


def test_a_failure_is_reported_with_its_exception() -> None:
    result = djtasks.explode.enqueue()
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class is ValueError and "boom" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018


def test_an_unknown_result_id_does_not_exist() -> None:
    with pytest.raises(TaskResultDoesNotExist):
        djtasks.add.get_result("default/no-such-job")


def test_a_job_naming_a_module_outside_the_installed_apps_imports_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whoever can write a job chooses its path: the worker imports only the project's apps."""
    marker = tmp_path / "imported"
    (tmp_path / "planted_dj28.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nx = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    backend = task_backends["default"]
    assert isinstance(backend, RelayMQBackend)
    runner = default_app().tasks[RUNNER]

    async def plant() -> str:
        relay = await relaymq.connect(backend.url)
        try:
            job = await relaymq.Queue("default", relay).add(runner.call("planted_dj28.x", [], {}))
            return job.id
        finally:
            await relay.close()

    job_id = asyncio.run(plant())
    drain()
    assert not marker.exists() and "planted_dj28" not in sys.modules
    found = asyncio.run(_job("default", job_id, backend.url))
    assert found is not None and found.state is relaymq.JobState.FAILED
    assert "not in one of the INSTALLED_APPS" in (found.error or "")


async def _job(queue: str, job_id: str, url: str) -> relaymq.Job | None:
    relay = await relaymq.connect(url)
    try:
        return await relaymq.Queue(queue, relay).get_job(job_id)
    finally:
        await relay.close()
