"""The producer API as a user meets it: options, not-found answers, decoded values, timeouts,
paused queues."""

from __future__ import annotations

import ast
import asyncio
import logging
import subprocess
import sys
from collections.abc import Collection, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import relaymq
from relaymq import (
    Call,
    ConfigError,
    JobNotFoundError,
    JobState,
    Queue,
    ResultTimeoutError,
    set_default_backend,
    task,
)
from relaymq import producer as producer_module
from relaymq.app import default_backend
from relaymq.backends.memory import InMemoryBackend
from relaymq.records.store import Beat, CancelResult, Outcome, Settle
from tests import tasks
from tests.support.jobs import get_job


def test_with_options_rejects_negative_retries_like_the_decorator() -> None:
    with pytest.raises(ConfigError, match="retries"):
        task(retries=-1)
    with pytest.raises(ConfigError, match="retries"):
        tasks.add.with_options(retries=-1)


async def test_options_validate_rejects_negative_retries_at_enqueue() -> None:
    queue = Queue("opts", InMemoryBackend())
    bad = Call(tasks.add, (1, 2), {}, replace(tasks.add.options, retries=-1))
    with pytest.raises(ConfigError, match="retries"):
        await queue.add(bad)
    assert sum((await queue.counts()).values()) == 0


def test_with_options_rejects_a_bad_queue_name_at_once() -> None:
    with pytest.raises(ConfigError, match="queue name"):
        tasks.add.with_options(queue="bad name")


async def test_missing_jobs_get_none_from_lookups_and_an_error_from_actions() -> None:
    queue = Queue("nf", InMemoryBackend())
    assert await queue.get_job("ghost") is None
    for action in (queue.cancel, queue.retry_job, queue.remove_job):
        with pytest.raises(JobNotFoundError, match="ghost"):
            await action("ghost")
    with pytest.raises(JobNotFoundError):
        await queue.handle("ghost").job()


async def test_actions_on_existing_jobs() -> None:
    queue = Queue("nf", InMemoryBackend())
    handle = await queue.add(tasks.add.call(1, 2))
    assert await queue.retry_job(handle.id) is False  # exists, but has not ended
    assert await queue.cancel(handle.id) is CancelResult.CANCELLED
    assert await queue.cancel(handle.id) is CancelResult.ALREADY_TERMINAL
    assert await queue.retry_job(handle.id) is True
    await queue.remove_job(handle.id)
    assert await queue.get_job(handle.id) is None


async def test_progress_and_result_come_back_decoded() -> None:
    backend = InMemoryBackend()
    queue = Queue("dec", backend)
    handle = await queue.add(tasks.add.call(1, 2))
    assert await handle.progress() is None
    [job] = (await backend.claim(["dec"], "w1", 1)).jobs
    await backend.heartbeat([Beat(job.claim, queue.serializer.dumps({"pct": 50}))])
    assert await handle.progress() == {"pct": 50}
    await backend.settle([Settle(job.claim, Outcome.COMPLETE, result=queue.serializer.dumps([3]))])
    stored = await queue.get_job(handle.id)
    assert stored is not None
    assert (stored.result, stored.progress) == (b"[3]", b'{"pct":50}')  # the record keeps bytes
    assert stored.result_value() == [3]
    assert stored.progress_value() == {"pct": 50}
    assert await handle.result(timeout=1) == [3]


async def test_result_timeout_says_no_worker_claimed_the_job() -> None:
    queue = Queue("lonely", InMemoryBackend())
    handle = await queue.add(tasks.add.call(1, 2))
    with pytest.raises(ResultTimeoutError) as e:
        await handle.result(timeout=0.05)
    assert isinstance(e.value, TimeoutError)
    assert "still waiting: no worker has claimed it" in str(e.value)
    assert "'lonely'" in str(e.value)
    assert (e.value.job_id, e.value.queue, e.value.state) == (handle.id, "lonely", "waiting")


async def test_result_timeout_names_a_paused_queue_and_a_running_job() -> None:
    backend = InMemoryBackend()
    queue = Queue("pz", backend)
    handle = await queue.add(tasks.add.call(1, 2))
    await queue.pause()
    with pytest.raises(ResultTimeoutError, match="'pz' is paused"):
        await handle.result(timeout=0.05)
    await queue.resume()
    await backend.claim(["pz"], "w7", 1)
    with pytest.raises(ResultTimeoutError, match="still running: attempt 1 of 1 on worker w7"):
        await handle.result(timeout=0.05)


async def test_enqueue_into_a_paused_queue_is_accepted_and_flagged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend = InMemoryBackend()
    other = Queue("paused-q", backend)  # pausing elsewhere: this process has not seen it
    await backend.pause("paused-q")
    checks = 0
    is_paused = backend.is_paused

    async def counted(name: str) -> bool:
        nonlocal checks
        checks += 1
        return await is_paused(name)

    backend.is_paused = counted  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="relaymq.queue"):
        first = await tasks.add.with_options(queue="paused-q", backend=backend).enqueue(1, 2)
        second = await other.add(tasks.add.call(3, 4))
    assert (first.paused, second.paused) == (True, True)
    assert checks == 1  # one check per queue per PAUSE_CHECK_EVERY, not one per enqueue
    assert [r.getMessage() for r in caplog.records] == [
        "queue 'paused-q' is paused: jobs are accepted, but no worker claims them until "
        "Queue.resume()"
    ]
    assert (await other.counts())[JobState.WAITING] == 2
    await other.resume()  # seen by this process at once
    assert (await other.add(tasks.add.call(5, 6))).paused is False
    assert checks == 1


async def test_a_queue_paused_elsewhere_is_noticed_after_the_check_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = InMemoryBackend()
    queue = Queue("later", backend)
    assert (await queue.add(tasks.add.call(1, 2))).paused is False
    await backend.pause("later")  # another process pauses it
    assert (await queue.add(tasks.add.call(1, 2))).paused is False  # not asked again yet
    monkeypatch.setattr(producer_module, "PAUSE_CHECK_EVERY", 0.0)
    assert (await queue.add(tasks.add.call(1, 2))).paused is True


# -- the producer layer imports without a circle --------------------------------------------

PACKAGE = Path(relaymq.__file__).parent

IMPORT_FIRST = """
import sys, types
package = types.ModuleType("relaymq")  # the package without running its __init__, which
package.__path__ = [{path!r}]          # would import every module in one fixed order first
sys.modules["relaymq"] = package
import {module}
print(" ".join(sorted(m for m in sys.modules if m.startswith("relaymq."))))
"""


@pytest.mark.parametrize(
    "module",
    [
        "relaymq.task",
        "relaymq.producer",
        "relaymq.app",
        "relaymq.queue",
        "relaymq.options",
        "relaymq.instrumented",
        "relaymq.backends",
        "relaymq.settings",
        "relaymq.worker",
        "relaymq.cli.app",
    ],
)
def test_each_producer_module_imports_first_in_a_fresh_interpreter(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_FIRST.format(path=str(PACKAGE), module=module)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert module in loaded
    above_the_app = ("relaymq.app", "relaymq.queue", "relaymq.worker", "relaymq.cli.app")
    if module not in ("relaymq.task", *above_the_app):
        assert "relaymq.task" not in loaded, f"{module} needs the task module"
    if module not in above_the_app:
        assert "relaymq.app" not in loaded, f"{module} needs the app"
    if module in ("relaymq.options", "relaymq.backends", "relaymq.settings"):
        assert "relaymq.queue" not in loaded, f"{module} needs the queue module"


def _runtime_imports(path: Path, name: str, modules: Collection[str]) -> set[str]:
    """The relaymq modules ``path`` imports when it loads (not for type checking, not inside
    functions): ``from pkg import sub`` imports the module ``pkg.sub`` when there is one, else
    a name from ``pkg``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            for alias in node.names:
                found.add(sub if (sub := f"{base}.{alias.name}") in modules else base)
    return found & set(modules)


def test_no_module_of_the_package_imports_itself_through_a_circle() -> None:
    """Module-level imports between relaymq's modules (the package root included) form no
    cycle."""
    modules: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {name: _runtime_imports(path, name, modules) - {name} for name, path in modules.items()}
    assert graph["relaymq.task"] >= {"relaymq.producer", "relaymq.options"}  # the graph is read
    assert "relaymq.bulk" in graph["relaymq.queue"]  # ``from relaymq import bulk``

    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(name) :], name]))
        if name not in done:
            for target in sorted(graph[name]):
                visit(target, [*path, name])
            done.add(name)

    for name in sorted(graph):
        visit(name, [])


# -- the default backend, beside connect() ---------------------------------------------------


@pytest.fixture
def no_default_backend() -> Iterator[None]:
    set_default_backend(None)
    yield
    set_default_backend(None)


async def test_enqueue_uses_the_tasks_backend_then_the_default_one(
    no_default_backend: None,
) -> None:
    default, own = InMemoryBackend(), InMemoryBackend()
    set_default_backend(default)
    handle = await tasks.add.enqueue(1, 2)
    assert handle.backend is default and await get_job(default, "tests", handle.id) is not None
    handle = await tasks.add.with_options(backend=own).enqueue(1, 2)
    assert handle.backend is own and await get_job(default, "tests", handle.id) is None


async def test_the_default_backend_connects_once_from_the_environment(
    no_default_backend: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELAYMQ_BACKEND", "memory://")
    first, second = await asyncio.gather(tasks.add.enqueue(1, 2), tasks.add.enqueue(3, 4))
    assert isinstance(first.backend, InMemoryBackend) and first.backend is second.backend
    assert await default_backend() is first.backend
    assert (await first.backend.counts("tests"))[JobState.WAITING] == 2


def test_the_default_backend_can_be_set_up_again_in_a_later_event_loop(
    no_default_backend: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two ``asyncio.run`` in one process (scripts, the CLI, tests) each race for the default
    backend: the guard must not stay bound to the first loop."""
    monkeypatch.setenv("RELAYMQ_BACKEND", f"sqlite:///{tmp_path / 'default.db'}")

    async def race() -> None:
        set_default_backend(None)
        first, second = await asyncio.gather(default_backend(), default_backend())
        assert first is second  # the second waited for the first one's connect
        await first.close()

    asyncio.run(race())
    asyncio.run(race())
