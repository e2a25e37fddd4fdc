"""The operator's pages in a real browser (as tests/dashboard/test_browser.py, whose server and
browser fixtures these share): a job's attempts, progress bars that move as the handler
reports, the workers page, a queue's and a task's figures with their charts, and search."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from relaymq import JobContext, Queue, registry, task
from relaymq.instrumented import Instrumented
from relaymq.records.store import TIME_BUCKETS, Tally, WorkerInfo, time_bucket
from relaymq.worker import Worker
from tests.dashboard import test_browser as browser
from tests.dashboard.support import failed, waiting
from tests.dashboard.test_browser import WITHIN, Served, live, shoot
from tests.support.jobs import queue_name
from tests.support.waiting import poll_until
from tests.tasks import add

# The browser tests' fixtures: a dashboard served over a fresh backend, a Chromium page, and
# the check that Chromium is there (skips locally, fails in CI).
served, page, _browser_there = browser.served, browser.page, browser._browser_there

GATES: dict[str, asyncio.Queue[None]] = {}
"""Per job id: one item lets ``crawl`` take its next step."""


@task(queue="tests")
async def crawl(ctx: JobContext, pages: int) -> int:
    """Reports ``{current, total, message}`` before each page, then waits for its gate."""
    gate = GATES.setdefault(ctx.job_id, asyncio.Queue())
    for n in range(1, pages + 1):
        ctx.progress({"current": n, "total": pages, "message": f"page {n}"})
        await gate.get()
    return pages


async def test_a_progress_bar_moves_on_the_job_and_queue_pages(served: Served, page: Any) -> None:
    from playwright.async_api import expect

    q = Queue(queue_name("crawls"), served.backend)
    job_id = (await q.add(crawl.with_options(queue=q.name).call(4))).id
    gate = GATES.setdefault(job_id, asyncio.Queue())
    await page.goto(f"{served.url}/queues/{q.name}/jobs/{job_id}")
    await live(page)
    worker = Worker(served.backend, [q.name])
    running = asyncio.create_task(worker.run())
    try:
        bar = page.locator("#job-progress .progress")
        await expect(bar.locator(".label")).to_have_text("1 of 4", timeout=WITHIN)
        assert await bar.locator("progress").evaluate("p => p.value") == 25
        gate.put_nowait(None)
        await expect(bar.locator(".label")).to_have_text("2 of 4", timeout=WITHIN)
        await expect(bar.locator(".progress-note")).to_have_text("page 2")
        assert await bar.locator("progress").evaluate("p => p.value") == 50
        await expect(page.locator("#job-progress pre")).to_be_hidden()  # a bar, not JSON
        await shoot(page, "job-progress")
        await page.goto(f"{served.url}/queues/{q.name}?state=active")
        cell = page.locator(f'[data-progress-of="{job_id}"]')  # stored: with a heartbeat
        await live(page)
        gate.put_nowait(None)
        await expect(cell.locator(".label")).to_have_text("3 of 4", timeout=WITHIN)
        assert await cell.locator("progress").evaluate("p => p.value") == 75
        await shoot(page, "queue-progress")
        gate.put_nowait(None)
        gate.put_nowait(None)
        await worker.until(lambda s: s.completed == 1, "the crawl completing")
    finally:
        worker.stop()
        await running


async def test_a_job_page_lists_its_attempts_with_their_errors(served: Served, page: Any) -> None:
    from playwright.async_api import expect

    q = Queue(queue_name("billing"), served.backend)
    [job] = await failed(q, 1)  # failed by a worker called "w", with a traceback
    await page.goto(f"{served.url}/queues/{q.name}/jobs/{job.id}")
    rows = page.locator("table.attempts tbody tr")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_contain_text("failed")
    await expect(rows.first.locator("summary")).to_have_text("ValueError: card declined")
    await rows.first.locator("summary").click()
    await expect(rows.first.locator("pre")).to_contain_text("Traceback (most recent call last)")
    await shoot(page, "job-attempts")


async def test_the_workers_page_shows_running_jobs_counts_and_silent_workers(
    served: Served, page: Any
) -> None:
    from playwright.async_api import expect

    q = Queue(queue_name("crawls"), served.backend)
    ops = Instrumented(served.backend)
    gone = WorkerInfo("gone-1", (q.name,), 4, "old-host", 4242, time.time() - 600)
    await registry.register(ops, gone, 0.05)  # it never renews: silent 50 ms from now
    await poll_until(lambda: _silent(ops), "the worker registered for 50 ms to go silent", within=5)
    job_id = (await q.add(crawl.with_options(queue=q.name).call(1))).id
    worker = Worker(served.backend, [q.name], concurrency=3)
    running = asyncio.create_task(worker.run())
    try:
        await worker.until(lambda s: s.claimed == 1, "the crawl starting")
        await page.goto(served.url + "/workers")
        row = page.locator(f'tr[data-worker="{worker.id}"]')
        await expect(row.get_by_role("link", name=job_id)).to_be_visible()
        await expect(row).to_contain_text(q.name)
        silent = page.locator('tr[data-worker="gone-1"]')
        await expect(silent.locator(".badge.silent")).to_have_text("silent")
        await expect(silent).to_contain_text("old-host")
        await shoot(page, "workers-page")
        GATES.setdefault(job_id, asyncio.Queue()).put_nowait(None)
        await worker.until(lambda s: s.completed == 1, "the crawl completing")
        await worker._renew_registration()  # what its next heartbeat does
        await page.reload()
        await expect(row.locator("td").nth(6)).to_have_text("1")  # processed since it started
    finally:
        worker.stop()
        await running


async def _silent(ops: Instrumented) -> bool:
    return any(w.id == "gone-1" for w in await ops.list_silent_workers())


async def test_a_queues_and_a_tasks_figures_and_charts(served: Served, page: Any) -> None:
    from playwright.async_api import expect

    q = Queue(queue_name("emails"), served.backend)
    now = int(time.time() // 60)
    fast, slow = time_bucket(0.04), time_bucket(2.0)
    tallies = []
    for i in range(0, 1440, 7):  # a day of history for two tasks, busier lately
        n = 30 if i < 60 else 8
        tallies.append(
            Tally(q.name, now - i, n, i % 5 == 0, i % 9 == 0, "app.mail:send", _one(fast, n))
        )
        tallies.append(
            Tally(q.name, now - i, 2, 0, i % 4 == 0, "app.mail:digest", _one(slow, 2), _one(0, 2))
        )
    await served.backend.add_tallies(tallies)
    await waiting(q, 1)  # the overview lists queues that hold jobs
    await page.goto(f"{served.url}/")
    await page.get_by_role("link", name=f"figures of {q.name}").first.click()
    await expect(page.get_by_role("heading", name=f"{q.name}: every task")).to_be_visible()
    hour = page.locator('section[data-window="1"]')
    await expect(hour.locator("svg.chart g.slot")).to_have_count(60)
    await expect(hour.locator(".figure").nth(3)).to_contain_text("ms")  # run time p50
    tip = await hour.locator("svg.chart g.slot").last.locator("title").text_content()
    assert tip is not None and "completed" in tip and " to " in tip
    await expect(page.locator('section[data-window="2"] svg.chart g.slot')).to_have_count(144)
    await shoot(page, "figures-queue")
    await page.get_by_role("link", name="app.mail:digest").click()
    await expect(page.get_by_role("heading", name="app.mail:digest")).to_be_visible()
    await expect(hour.locator(".figure").nth(3)).to_contain_text(" s")  # about two seconds
    await expect(hour.locator(".figure").nth(1)).to_contain_text("% of ended jobs")
    await shoot(page, "figures-task")


def _one(bucket: int, n: int) -> tuple[int, ...]:
    """``n`` durations in ``bucket`` of ``TIME_BUCKETS``."""
    assert bucket <= len(TIME_BUCKETS)
    return (0,) * bucket + (n,)


async def test_a_search_by_argument_value_from_the_queue_page(served: Served, page: Any) -> None:
    from playwright.async_api import expect

    q = Queue(queue_name("billing"), served.backend)
    handles = await q.add_bulk([add.call(i % 4, i) for i in range(12)])
    await page.goto(f"{served.url}/queues/{q.name}")
    search = page.get_by_role("search")
    await search.get_by_label("Arguments").fill("args.0=2 args.1~1")
    await search.get_by_role("button", name="Search").click()
    rows = page.locator("table.jobs tbody tr")
    await expect(rows).to_have_count(1)  # a = 2 and b with a 1 in it: (2, 10)
    await expect(rows.first).to_contain_text(handles[10].id)
    await expect(search.get_by_label("Arguments")).to_have_value("args.0=2 args.1~1")
    await shoot(page, "queue-search")
    await search.get_by_label("Arguments").fill("args=2")
    await search.get_by_role("button", name="Search").click()
    await expect(page.get_by_role("alert")).to_contain_text("args takes a position first")
