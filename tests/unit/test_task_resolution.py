"""Which tasks a worker runs: only those registered in its process by the modules it was
started with. A job's task name never makes a worker import a module, unless the worker lists
that module's prefix in ``import_prefixes`` (an explicit opt-in)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from relaymq.app import default_app
from relaymq.errors import TaskNotFoundError
from relaymq.job import Job, JobState
from relaymq.records.store import Outcome, Settle
from relaymq.serializers import DEFAULT_SERIALIZER
from relaymq.settings import Settings
from relaymq.worker.execution import Execution
from relaymq.worker.running import RunningJob
from tests import tasks

NOW = 1_800_000_000.0


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A module on ``sys.path`` whose import leaves a marker file (as an attacker's would run
    code), defining the task ``planted_28:t``."""
    marker = tmp_path / "imported"
    (tmp_path / "planted_28.py").write_text(
        "from pathlib import Path\n"
        "from relaymq import task\n"
        f"Path({str(marker)!r}).write_text('ran')\n"
        "@task()\n"
        "def t() -> str:\n"
        "    return 'ran'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield marker
    sys.modules.pop("planted_28", None)
    default_app().tasks.pop("planted_28:t", None)


def claimed(task: str, payload: bytes = b'{"args":[],"kwargs":{}}', attempts: int = 1) -> Job:
    return Job(
        "q",
        "j1",
        task,
        payload,
        JobState.ACTIVE,
        created_at=NOW,
        attempts=attempts,
        max_attempts=3,
        token=1,
        claimed_at=NOW,
    )


async def attempt(job: Job, import_prefixes: tuple[str, ...] = ()) -> Settle:
    async def held(r: RunningJob) -> bool:
        return True

    ex = Execution(
        DEFAULT_SERIALIZER, held, lambda r, v: None, 60.0, import_prefixes=import_prefixes
    )
    settle = await ex.run(RunningJob(job, job.claim), NOW)
    assert settle is not None
    return settle


def ran(marker: Path) -> bool:
    """Whether the planted module's top-level code ran."""
    return marker.exists()


def test_resolve_imports_nothing_for_an_unregistered_name(planted: Path) -> None:
    with pytest.raises(TaskNotFoundError, match="not registered in this worker"):
        default_app().resolve("planted_28:t")
    assert not planted.exists() and "planted_28" not in sys.modules


@pytest.mark.parametrize("name", ["this:x", "planted_28:t", "os:system"])
async def test_a_job_naming_an_unregistered_module_fails_as_unknown_and_imports_nothing(
    planted: Path, name: str
) -> None:
    was_imported = "this" in sys.modules
    settle = await attempt(claimed(name))
    assert settle.outcome is Outcome.RETRY
    assert "another worker may know it" in settle.error
    assert "not registered" in settle.error
    assert not ran(planted) and "planted_28" not in sys.modules
    assert ("this" in sys.modules) is was_imported


async def test_a_registered_task_still_runs() -> None:
    settle = await attempt(claimed(tasks.add.name, b'{"args":[1,2],"kwargs":{}}'))
    assert settle.outcome is Outcome.COMPLETE


async def test_import_prefixes_opt_in_to_importing_those_modules_only(planted: Path) -> None:
    settle = await attempt(claimed("planted_28:t"), import_prefixes=("other",))
    assert settle.outcome is Outcome.RETRY and not ran(planted)
    settle = await attempt(claimed("planted_28:t"), import_prefixes=("planted_28",))
    assert settle.outcome is Outcome.COMPLETE and ran(planted)


def test_a_prefix_matches_whole_module_names_only(planted: Path) -> None:
    with pytest.raises(TaskNotFoundError):
        default_app().resolve("planted_28:t", import_prefixes=("planted",))
    assert not planted.exists()
    assert (
        default_app().resolve("planted_28:t", import_prefixes=("planted_28",)).name
        == "planted_28:t"
    )


def test_import_prefixes_come_from_the_environment() -> None:
    env = {"RELAYMQ_IMPORT_PREFIXES": "app.tasks, billing"}
    assert Settings.from_env(env).import_prefixes == ("app.tasks", "billing")
    assert Settings().import_prefixes == ()


def test_code_may_still_name_a_task_to_import(planted: Path) -> None:
    """``schedule("mod:fn")`` and ``relaymq schedule add`` are the operator's own words."""
    assert default_app().import_task("planted_28:t").name == "planted_28:t" and planted.exists()
