"""The dashboard in a real browser: Playwright drives Debian's Chromium against the app served
by uvicorn on a free loopback port, with a worker and producers in the same process.

A screenshot of each page goes to ``SCREENSHOTS`` (default ``.screenshots/`` at the top of the
checkout) for a reviewer to look at.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from relaymq import Queue, Schedules
from relaymq.backends.memory import InMemoryBackend
from relaymq.dashboard import create_app
from relaymq.job import JobState
from relaymq.records.store import Tally
from relaymq.schedules import define
from relaymq.worker import Worker
from tests.dashboard.support import failed, waiting
from tests.support.jobs import queue_name
from tests.support.waiting import poll_until
from tests.tasks import add, with_context

CHROMIUM = os.environ.get("RELAYMQ_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = Path(
    os.environ.get("RELAYMQ_SCREENSHOTS", Path(__file__).parents[2] / ".screenshots")
)
WITHIN = 10_000
"""Milliseconds a page gets to show what the test waits for."""

pytestmark = pytest.mark.timeout(120)


def _unavailable() -> str | None:
    if not shutil.which(CHROMIUM):
        return f"no Chromium at {CHROMIUM} (make test installs Debian's chromium)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    return None


@pytest.fixture(scope="module", autouse=True)
def _browser_there() -> None:
    reason = _unavailable()
    if reason and os.environ.get("CI"):
        pytest.fail(f"browser tests cannot run in CI: {reason}", pytrace=False)
    if reason:
        pytest.skip(reason)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)


@dataclass
class Served:
    backend: InMemoryBackend
    url: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def serve(**options: Any) -> AsyncIterator[Served]:
    """The dashboard over a fresh in-memory backend, on a free loopback port."""
    import uvicorn

    backend = InMemoryBackend()
    await backend.connect()
    port = _free_port()
    app = create_app(backend, live_interval=0.1, **options)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    try:
        await poll_until(lambda: server.started, "uvicorn listening", within=10)
        yield Served(backend, f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        await serving
        await backend.close()


@pytest_asyncio.fixture
async def served() -> AsyncIterator[Served]:
    async with serve() as s:
        yield s


@pytest_asyncio.fixture
async def page() -> AsyncIterator[object]:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 800})
            tab = await context.new_page()
            tab.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
            refused: list[str] = []  # what the Content-Security-Policy blocked, if anything
            tab.on(
                "console",
                lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None,
            )
            yield tab
            assert refused == [], "the page broke its own Content-Security-Policy"
        finally:
            await browser.close()


async def shoot(page: object, name: str) -> None:
    await page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)  # type: ignore[attr-defined]


async def live(page: object) -> None:
    """Wait until the page's event stream is open (the header's dot turns green)."""
    from playwright.async_api import expect

    await expect(page.locator("#live.on")).to_have_count(1, timeout=WITHIN)  # type: ignore[attr-defined]


async def test_the_overview_loads_and_a_count_changes_live(served: Served, page: object) -> None:
    from playwright.async_api import expect

    q = Queue(queue_name("emails"), served.backend)
    await waiting(q, 1)
    now = int(time.time() // 60)  # an hour of history, for the charts in the screenshot
    await served.backend.add_tallies(
        [
            Tally(
                q.name, now - i, completed=20 + i % 7 * 5, retried=i % 11 == 0, failed=i % 13 == 0
            )
            for i in range(0, 600, 3)
        ]
    )
    p: object = page
    await p.goto(served.url + "/")  # type: ignore[attr-defined]
    cell = p.locator(f'[data-count="{q.name}:waiting"]')  # type: ignore[attr-defined]
    await expect(cell).to_have_text("1")
    await live(p)
    await waiting(q, 2)  # another process enqueues: the open page follows without a reload
    await expect(cell).to_have_text("3", timeout=WITHIN)
    await expect(p.locator("svg.chart rect.ok").first).to_be_visible()  # type: ignore[attr-defined]
    await shoot(p, "overview")


async def test_a_dead_letter_is_replayed_from_the_dlq_page(served: Served, page: object) -> None:
    from playwright.async_api import expect

    q = Queue(queue_name("billing"), served.backend)
    jobs = await failed(q, 2)
    p: object = page
    await p.goto(served.url + "/dlq")  # type: ignore[attr-defined]
    await expect(p.get_by_text("ValueError: card declined").first).to_be_visible()  # type: ignore[attr-defined]
    await shoot(p, "dlq")
    await p.get_by_label(f"select {jobs[0].id}").check()  # type: ignore[attr-defined]
    await p.get_by_role("button", name="Replay").click()  # type: ignore[attr-defined]  # confirm: accepted
    await expect(p.get_by_role("status")).to_contain_text(f"1 job of {q.name} replayed")  # type: ignore[attr-defined]
    replayed = await q.get_job(jobs[0].id)
    assert replayed is not None and replayed.state is JobState.WAITING
    still = await q.get_job(jobs[1].id)
    assert still is not None and still.state is JobState.FAILED


async def test_a_job_page_shows_its_events_as_they_happen(served: Served, page: object) -> None:
    from playwright.async_api import expect

    q = Queue(queue_name("reports"), served.backend)
    job_id = (await q.add(with_context.call("monthly"))).id  # it reports progress
    p: object = page
    await p.goto(f"{served.url}/queues/{q.name}/jobs/{job_id}")  # type: ignore[attr-defined]
    await expect(p.locator("#job-state")).to_have_text("waiting")  # type: ignore[attr-defined]
    await live(p)
    worker = Worker(served.backend, [q.name])
    running = asyncio.create_task(worker.run())
    try:
        completed = p.locator('#job-events li[data-event="job:completed"]')  # type: ignore[attr-defined]
        await expect(completed).to_have_count(1, timeout=WITHIN)
        await expect(p.locator("#job-state")).to_have_text("completed", timeout=WITHIN)  # type: ignore[attr-defined]
        await expect(p.locator("#job-progress pre")).to_contain_text('"pct": 50')  # type: ignore[attr-defined]
        await shoot(p, "job")
        await p.goto(served.url + "/workers")  # type: ignore[attr-defined]
        await expect(p.get_by_text(worker.id)).to_be_visible()  # type: ignore[attr-defined]
        await shoot(p, "workers")
    finally:
        worker.stop()
        await running


async def test_the_queue_page_acts_on_ticked_jobs(served: Served, page: object) -> None:
    from playwright.async_api import expect

    q = Queue(queue_name("thumbnails"), served.backend)
    ids = await waiting(q, 3)
    p: object = page
    await p.goto(f"{served.url}/queues/{q.name}")  # type: ignore[attr-defined]
    await shoot(p, "queue")
    await p.get_by_label(f"select {ids[1]}").check()  # type: ignore[attr-defined]
    await p.get_by_role("button", name="Cancel").click()  # type: ignore[attr-defined]
    await expect(p.get_by_role("status")).to_contain_text("1 job cancelled")  # type: ignore[attr-defined]
    job = await q.get_job(ids[1])
    assert job is not None and job.state is JobState.CANCELLED
    await expect(p.locator(f'nav.tabs [data-count="{q.name}:waiting"]')).to_have_text("2")  # type: ignore[attr-defined]


async def test_signing_in_with_the_password(page: object) -> None:
    from playwright.async_api import expect

    async with serve(password="correct horse") as s:
        await waiting(Queue(queue_name("private"), s.backend), 1)
        p: object = page
        await p.goto(s.url + "/workers")  # type: ignore[attr-defined]
        await expect(p.get_by_label("Token or password")).to_be_visible()  # type: ignore[attr-defined]
        await shoot(p, "login")
        await p.get_by_label("Token or password").fill("wrong")  # type: ignore[attr-defined]
        await p.get_by_role("button", name="Sign in").click()  # type: ignore[attr-defined]
        await expect(p.get_by_role("alert")).to_contain_text("not the dashboard")  # type: ignore[attr-defined]
        await p.get_by_label("Token or password").fill("correct horse")  # type: ignore[attr-defined]
        await p.get_by_role("button", name="Sign in").click()  # type: ignore[attr-defined]
        await expect(p.get_by_role("heading", name="Workers")).to_be_visible()  # type: ignore[attr-defined]
        await p.get_by_role("button", name="Sign out").click()  # type: ignore[attr-defined]
        await expect(p.get_by_label("Token or password")).to_be_visible()  # type: ignore[attr-defined]


async def test_a_schedule_is_paused_and_run_from_the_schedules_page(
    served: Served, page: object
) -> None:
    from playwright.async_api import expect

    q = queue_name("reports")
    book = Schedules(served.backend)
    await book.add(
        define(
            add, id="nightly-report", cron="30 2 * * *", tz="Europe/Berlin", args=(1, 2), queue=q
        )
    )
    p: object = page
    await p.goto(served.url + "/schedules")  # type: ignore[attr-defined]
    await expect(p.get_by_text("cron 30 2 * * * Europe/Berlin")).to_be_visible()  # type: ignore[attr-defined]
    await shoot(p, "schedules")
    await p.get_by_role("button", name="pause").click()  # type: ignore[attr-defined]
    await expect(p.get_by_role("status")).to_contain_text("schedule nightly-report paused")  # type: ignore[attr-defined]
    await expect(p.get_by_role("button", name="resume")).to_be_visible()  # type: ignore[attr-defined]
    assert (await book.get("nightly-report")).paused
    await p.get_by_role("button", name="run now").click()  # type: ignore[attr-defined]
    await expect(p.get_by_role("status")).to_contain_text("enqueued job nightly-report@now-")  # type: ignore[attr-defined]
    assert (await Queue(q, served.backend).counts())[JobState.WAITING] == 1


async def test_live_counts_keep_apart_queues_whose_names_share_a_colon_prefix(
    served: Served, page: object
) -> None:
    from playwright.async_api import expect

    q = Queue(queue_name("mail"), served.backend)
    sub = Queue(q.name + ":bulk", served.backend)  # ':' is allowed in a queue name
    await waiting(q, 1)
    await waiting(sub, 2)
    p: object = page
    await p.goto(served.url + "/")  # type: ignore[attr-defined]
    mine = p.locator(f'[data-count="{q.name}:waiting"]')  # type: ignore[attr-defined]
    other = p.locator(f'[data-count="{sub.name}:waiting"]')  # type: ignore[attr-defined]
    await expect(other).to_have_text("2")
    await live(p)
    await waiting(q, 2)  # counts of q pushed live: they are q's alone
    await expect(mine).to_have_text("3", timeout=WITHIN)
    await expect(other).to_have_text("2")


async def test_a_job_whose_id_has_a_slash_is_reached_by_its_link_and_follows_live(
    served: Served, page: object
) -> None:
    from playwright.async_api import expect

    q = Queue(queue_name("reports"), served.backend)
    job_id = "reports/daily@2026-12-05 #1?"
    await q.add(with_context.with_options(queue=q.name, job_id=job_id).call("daily"))
    p: object = page
    await p.goto(f"{served.url}/queues/{q.name}")  # type: ignore[attr-defined]
    await p.get_by_role("link", name=job_id).click()  # type: ignore[attr-defined]
    await expect(p.get_by_role("heading", name=job_id)).to_be_visible()  # type: ignore[attr-defined]
    await live(p)
    worker = Worker(served.backend, [q.name])
    running = asyncio.create_task(worker.run())
    try:
        await expect(p.locator("#job-state")).to_have_text("completed", timeout=WITHIN)  # type: ignore[attr-defined]
        await expect(p.locator('#job-events li[data-event="job:completed"]')).to_have_count(1)  # type: ignore[attr-defined]
    finally:
        worker.stop()
        await running
