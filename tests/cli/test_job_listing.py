"""``relaymq job list`` and ``job show`` read as a new user expects: a future time is "in 58m",
an empty listing says it shows one state, delayed jobs show when they run, active ones when
they started and their progress."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from relaymq import Queue, connect, registry
from relaymq.cli import main, output
from relaymq.records.store import Beat, WorkerInfo
from tests import tasks


def test_relative_times_say_ago_or_in() -> None:
    assert output.relative(1000.0, now=1000.0 + 90) == "2m ago"
    assert output.relative(1000.0 + 3480, now=1000.0) == "in 58m"
    assert output.relative(1000.0, now=1000.0) == "now"


def prepare(url: str, delay: float) -> str:
    async def go() -> str:
        backend = await connect(url)
        try:
            handle = await Queue("reports", backend).add(
                tasks.add.with_options(delay=delay).call(1, 2)
            )
            return handle.id
        finally:
            await backend.close()

    return asyncio.run(go())


def test_job_show_says_when_a_delayed_job_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/show.db"
    job_id = prepare(url, 3500)
    assert main(["job", "show", "reports", job_id, "--backend", url]) == 0
    out = capsys.readouterr().out
    run_at = next(line for line in out.splitlines() if "run_at" in line)
    assert "in 58m" in run_at and "ago" not in run_at, run_at


def test_an_empty_listing_says_which_state_it_shows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/empty.db"
    prepare(url, 3500)  # delayed: nothing waiting
    assert main(["job", "list", "reports", "--backend", url]) == 0
    captured = capsys.readouterr()
    assert "no waiting jobs" in captured.err and "--state delayed" in captured.err
    assert "1 delayed" in captured.err


def test_the_delayed_listing_shows_run_at(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/delayed.db"
    job_id = prepare(url, 3500)
    assert main(["job", "list", "reports", "--state", "delayed", "--backend", url]) == 0
    out = capsys.readouterr().out
    assert "runs" in out.splitlines()[1]  # the header
    row = next(line for line in out.splitlines() if job_id in line)
    assert "in 58m" in row


def test_the_active_listing_shows_started_and_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/active.db"
    job_id = prepare(url, 0)

    async def claim() -> None:
        backend = await connect(url)
        try:
            batch = await backend.claim(["reports"], "wk-1", 1)
            [job] = batch.jobs
            await backend.heartbeat([Beat(job.claim, b'{"done":40}')])
        finally:
            await backend.close()

    asyncio.run(claim())
    assert main(["job", "list", "reports", "--state", "active", "--backend", url]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[1]
    assert "started" in header and "progress" in header
    row = next(line for line in out.splitlines() if job_id in line)
    assert "(now)" in row or "ago" in row, row
    assert '{"done":40}' in row, row


def test_a_queue_a_worker_serves_exists_before_it_holds_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/served.db"

    async def serve() -> None:
        backend = await connect(url)
        try:
            info = WorkerInfo.for_this_process("wk-7", ["reports"], 4)
            await registry.register(backend, info, 60)
        finally:
            await backend.close()

    asyncio.run(serve())
    assert main(["queue", "info", "reports", "--backend", url]) == 0
    out = capsys.readouterr().out
    assert "waiting=0" in out and "wk-7 (4)" in out
    assert main(["job", "list", "reports", "--backend", url]) == 0
    assert main(["queue", "info", "nobody", "--backend", url]) == 1
    assert "no queue 'nobody'" in capsys.readouterr().err


def test_job_list_and_show_name_the_sequence_and_what_it_waits_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/sequence.db"

    async def go() -> list[str]:
        backend = await connect(url)
        try:
            q = Queue("sync", backend)
            task = tasks.add.with_options(sequence="customer:42")
            handles = [await q.add(task.call(n, n)) for n in range(2)]
            await backend.claim(["sync"], "w", 10)  # the first runs; the second waits on it
            return [h.id for h in handles]
        finally:
            await backend.close()

    first, second = asyncio.run(go())
    assert main(["job", "list", "sync", "--backend", url]) == 0
    listing = capsys.readouterr().out
    assert "sequence" in listing and "customer:42" in listing
    assert main(["job", "show", "sync", second, "--backend", url]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "sequence_waits_on" in x)
    assert f"{first} (active)" in line, line
    assert main(["job", "show", "sync", second, "--backend", url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["sequence"] == "customer:42" and shown["sequence_on_failure"] == "hold"
    assert shown["sequence_waits_on"] == {"id": first, "state": "active"}
