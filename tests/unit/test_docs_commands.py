"""The shell commands of README.md and docs/ run as written: each ``relaymq ...`` line, in a
folder holding README's ``app/tasks.py``, against an SQLite file with jobs in ``emails``
(``RELAYMQ_BACKEND``; a ``--backend`` the line names is left out, so a Redis URL in a line does
not touch a shared server). Commands that keep running (a worker, the dashboard, ``--watch``)
must start and then stop cleanly on SIGTERM/SIGINT. README's own walk-through runs too:
``relaymq worker app.tasks -q emails`` completes the job README's ``enqueue.py`` enqueues."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from relaymq import Queue, connect
from relaymq.options import Options
from relaymq.records.store import Outcome, Settle
from relaymq.schedules import Schedules, define
from relaymq.task import Task

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON = re.findall(r"```python\n(.*?)```", README, re.DOTALL)
APP_TASKS, ENQUEUE = PYTHON[0], PYTHON[1]
PYTEST_EXAMPLE = next(block for block in PYTHON if "def test_send_welcome" in block)
BILLING = """from relaymq import task


@task(name="app.billing:invoice")  # docs/scheduling.md's task
async def invoice(customer: str) -> None: ...
"""


def shell_commands(text: str) -> list[str]:
    """The ``relaymq`` lines of a page: in indented blocks and in ```console blocks."""
    lines = re.findall(r"^    (relaymq .*)$", text, re.MULTILINE)
    for block in re.findall(r"```console\n(.*?)```", text, re.DOTALL):
        lines += [line for line in block.splitlines() if line.startswith("relaymq ")]
    return lines


COMMANDS = sorted({c for page in PAGES for c in shell_commands(page.read_text())})
LONG_RUNNING = ("worker", "dashboard", "--watch")


def argv_of(command: str, job_id: str) -> list[str]:
    """The command's words, without its ``--backend`` and with a real job id."""
    words = shlex.split(command.replace("JOB_ID", job_id), comments=True)[1:]
    out: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in ("--backend", "-b"):
            skip = True
        else:
            out.append(word)
    return out


async def _noop(address: str) -> str:
    return "sent"


async def _invoice(customer: str) -> None:
    return None


async def prepare_store(url: str) -> str:
    """Jobs in ``emails``: two waiting, one failed (its id stands for JOB_ID); the schedule
    ``invoice-acme`` of docs/scheduling.md."""
    backend = await connect(url)
    try:
        send = Task(_noop, "app.tasks:send_welcome", Options(queue="emails"), False)
        queue = Queue("emails", backend)
        await queue.add(send.call("a@example.com"))
        await queue.add(send.call("b@example.com"))
        await queue.add(send.call("c@example.com"))
        batch = await backend.claim(["emails"], "wk-docs", 1)
        [claimed] = batch.jobs
        await backend.settle([Settle(claimed.claim, Outcome.FAIL, error="RuntimeError: no")])
        invoice = Task(_invoice, "app.billing:invoice", Options(queue="billing"), False)
        schedule = define(invoice, id="invoice-acme", cron="0 6 1 * *", args=("acme",))
        await Schedules(backend).add(schedule)
        return claimed.id
    finally:
        await backend.close()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("docs-store")
    job_id = asyncio.run(prepare_store(f"sqlite:///{folder / 'relaymq.db'}"))
    return folder / "relaymq.db", job_id


def app_folder(tmp_path: Path) -> Path:
    """A project folder as README's reader has it: ``app/tasks.py``, ``enqueue.py``."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "tasks.py").write_text(APP_TASKS)
    (tmp_path / "app" / "billing.py").write_text(BILLING)
    (tmp_path / "enqueue.py").write_text(ENQUEUE)
    return tmp_path


def environment(folder: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RELAYMQ_YES": "1",
        "RELAYMQ_BACKEND": f"sqlite:///{folder}/relaymq.db",
        "RELAYMQ_DASHBOARD_PORT": "0",
        "RELAYMQ_LOG_LEVEL": "INFO",
    }


async def read_until(stream: asyncio.StreamReader, wanted: str, what: str) -> str:
    """Lines of ``stream`` until one holds ``wanted``; fails naming ``what`` after 30 s."""
    seen: list[str] = []
    try:
        async with asyncio.timeout(30):
            while True:
                line = (await stream.readline()).decode()
                if not line:
                    raise AssertionError(f"{what}: the output ended first: {''.join(seen)}")
                seen.append(line)
                if wanted in line:
                    return line
    except TimeoutError:
        raise AssertionError(f"gave up after 30s waiting for {what}: {''.join(seen)}") from None


def test_the_pages_have_shell_commands() -> None:
    assert len(COMMANDS) >= 20
    assert any(c.startswith("relaymq worker app.tasks -q emails") for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
async def test_every_shell_command_runs(
    command: str, template: tuple[Path, str], tmp_path: Path
) -> None:
    db, job_id = template
    folder = app_folder(tmp_path)
    await asyncio.to_thread(shutil.copy, db, folder / "relaymq.db")
    argv = argv_of(command, job_id)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relaymq",
        *argv,
        cwd=folder,
        env=environment(folder),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    if any(word in argv for word in LONG_RUNNING):
        if argv[0] == "worker":
            await read_until(proc.stderr, "started on", "the worker's start line")
        elif argv[0] == "dashboard":
            await read_until(proc.stderr, "http://", "the dashboard's address")
        else:
            await read_until(proc.stdout, "emails", "the first refresh")
        proc.send_signal(signal.SIGTERM if argv[0] == "worker" else signal.SIGINT)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, f"{command}\n{out.decode()[-2000:]}\n{err.decode()[-2000:]}"


async def test_readme_worker_with_q_runs_the_job_enqueue_py_enqueues(tmp_path: Path) -> None:
    """README's walk-through: ``app/tasks.py``, ``relaymq worker app.tasks -q emails``, then
    ``python enqueue.py`` prints the result the worker stored; SIGTERM stops the worker."""
    folder = app_folder(tmp_path)
    env = environment(folder)
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relaymq",
        "worker",
        "app.tasks",
        "-q",
        "emails",
        cwd=folder,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert worker.stderr is not None
    try:
        await read_until(worker.stderr, "started on emails", "the worker's start line")
        enqueue = await asyncio.create_subprocess_exec(
            sys.executable,
            "enqueue.py",
            cwd=folder,
            env={**env, "PYTHONPATH": f"{folder}:{ROOT}"},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(enqueue.communicate(), 60)
        assert enqueue.returncode == 0, err.decode()
        assert out.decode().strip() == "sent"
    finally:
        worker.send_signal(signal.SIGTERM)
        _, werr = await asyncio.wait_for(worker.communicate(), 60)
    assert worker.returncode == 0, werr.decode()[-2000:]


def test_readme_pytest_example_passes_as_written(tmp_path: Path) -> None:
    """README's ``test_tasks.py``, run by pytest in a folder of its own (no configuration:
    the marker it shows is what makes it run)."""
    folder = app_folder(tmp_path)
    (folder / "test_tasks.py").write_text(PYTEST_EXAMPLE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_tasks.py"],
        cwd=folder,
        env={**environment(folder), "PYTHONPATH": f"{folder}:{ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
