"""The dashboard's pages and actions over HTTP (httpx against the ASGI app, on the test's own
event loop): what each page shows, what each action changes, and what is refused."""

from __future__ import annotations

import asyncio
import html
import re
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.routing import Mount

from relaymq import Queue, Schedules
from relaymq.backends.base import Backend
from relaymq.backends.memory import InMemoryBackend
from relaymq.cli.app import cli
from relaymq.dashboard import Access, create_app, exposure_problem
from relaymq.job import JobState
from relaymq.records.store import Outcome, Settle, Tally
from relaymq.schedules import define
from relaymq.worker import Worker
from tests.dashboard.support import ERROR, client, csrf, failed, waiting
from tests.redis.server import PrivateRedis
from tests.support.jobs import new_job, queue_name
from tests.support.waiting import poll_until
from tests.tasks import add


async def test_the_overview_shows_every_queue_with_its_counts_and_history(
    backend: Backend,
) -> None:
    """On every backend: counts per state, the paused flag, and the stored history's totals."""
    busy, idle = Queue(queue_name("busy"), backend), Queue(queue_name("idle"), backend)
    await failed(busy, 1)
    await waiting(busy, 3)
    await waiting(idle, 1)
    await idle.pause()
    minute = int(time.time() // 60)
    await backend.add_tallies([Tally(busy.name, minute, completed=7, retried=1, failed=2)])
    async with client(backend) as c:
        page = (await c.get("/")).text
    assert f'data-count="{busy.name}:waiting">3<' in page
    assert f'data-count="{busy.name}:failed">1<' in page
    assert f'data-paused="{idle.name}">paused' in page  # shown
    assert f'data-paused="{busy.name}" hidden>paused' in page  # not paused: hidden
    assert "7 done, 2 failed (22.2% of ended jobs), 1 attempt retried" in page


async def test_a_queue_page_pages_its_jobs_and_searches_by_id_and_task(  # and see test_search.py
    memory: InMemoryBackend,
) -> None:
    q = Queue(queue_name(), memory)
    ids = await waiting(q, 5)
    async with client(memory, page_size=2) as c:
        first = (await c.get(f"/queues/{q.name}")).text
        third = (await c.get(f"/queues/{q.name}?state=waiting&page=3")).text
        found = await c.get(f"/queues/{q.name}?id={ids[3]}")
        missing = (await c.get(f"/queues/{q.name}?id=nope")).text
        by_task = (await c.get(f"/queues/{q.name}?state=waiting&task=tests.tasks:add")).text
        other_task = (await c.get(f"/queues/{q.name}?state=waiting&task=other")).text
    assert ids[0] in first and ids[1] in first and ids[2] not in first and "next page" in first
    assert ids[4] in third and ids[3] not in third and "next page" not in third
    assert (found.status_code, found.headers["location"]) == (
        303,
        f"http://dash/queues/{q.name}/jobs/{ids[3]}",
    )
    assert "No waiting jobs match this search" in missing  # no id starts with it either
    assert ids[0] in by_task and ids[0] not in other_task
    assert "No waiting jobs match this search" in other_task
    assert "Limits" not in first


async def test_a_blocked_job_is_listed_and_links_what_it_waits_for(
    memory: InMemoryBackend,
) -> None:
    q = Queue(queue_name(), memory)
    [first] = await waiting(q, 1)
    blocked = await q.add(add.with_options(queue=q.name, depends_on=[first]).call(1, 2))
    async with client(memory) as c:
        listing = (await c.get(f"/queues/{q.name}?state=blocked")).text
        page = (await c.get(f"/queues/{q.name}/jobs/{blocked.id}")).text
    assert blocked.id in listing and f'data-count="{q.name}:blocked">1<' in listing
    assert f'/queues/{q.name}/jobs/{first}">{first}</a>' in page
    assert "(if one does not complete: fail)" in page


async def test_a_job_of_a_held_sequence_shows_what_it_waits_on(memory: InMemoryBackend) -> None:
    q = Queue(queue_name(), memory)
    await memory.enqueue([new_job(q.name, i, sequence="customer:42") for i in ("s0", "s1")])
    [s0] = (await memory.claim([q.name], "w", 10)).jobs
    await memory.settle([Settle(s0.claim, Outcome.FAIL, error="ValueError: nope")])
    async with client(memory) as c:
        page = (await c.get(f"/queues/{q.name}/jobs/s1")).text
        listing = (await c.get(f"/queues/{q.name}")).text
    assert "<dt>sequence</dt><dd>customer:42: waits on" in page
    assert f'/queues/{q.name}/jobs/s0">s0</a> <span class="badge state-failed">failed' in page
    assert "· customer:42" in listing


async def test_a_queue_page_shows_the_queues_limits(memory: InMemoryBackend) -> None:
    q = Queue(queue_name(), memory)
    await waiting(q, 1)
    await q.set_limits(max_active=3, rate="50/m")
    async with client(memory) as c:
        page = (await c.get(f"/queues/{q.name}")).text
    assert "Limits, over every worker: at most 3 active, 50 per 60s" in page


async def test_a_queue_page_shows_the_queues_retention(memory: InMemoryBackend) -> None:
    q = Queue(queue_name(), memory)
    await waiting(q, 1)
    async with client(memory) as c:
        default = (await c.get(f"/queues/{q.name}")).text
        await q.set_retention(completed=3600, failed=0)
        page = (await c.get(f"/queues/{q.name}")).text
    assert "Finished jobs kept: completed 1d, cancelled 1d, failed 1w" in default
    assert "Finished jobs kept: completed 1h, cancelled 1d, failed forever" in page


async def test_a_queue_page_shows_the_keys_at_their_cap(memory: InMemoryBackend) -> None:
    q = Queue(queue_name(), memory)
    await q.set_limits(key_max_active=1)
    await memory.enqueue([new_job(q.name, limit_key=k) for k in ("a", "a", "b")])
    assert len((await memory.claim([q.name], "w", 10)).jobs) == 2
    async with client(memory) as c:
        page = (await c.get(f"/queues/{q.name}")).text
    assert "Waiting jobs held back: 1; keys at their cap: a, b" in page
    assert "active jobs of the busiest keys: a 1, b 1" in page


async def test_the_job_page_shows_arguments_error_and_traceback(memory: InMemoryBackend) -> None:
    q = Queue(queue_name(), memory)
    [job] = await failed(q, 1)
    async with client(memory) as c:
        page = (await c.get(f"/queues/{q.name}/jobs/{job.id}")).text
        gone = await c.get(f"/queues/{q.name}/jobs/nope")
    assert "tests.tasks:add" in page and "state-failed" in page
    assert "ValueError: card declined" in page and "Traceback (most recent call last)" in page
    assert '"args": [\n    0,\n    0\n  ]' in html.unescape(page)  # decoded, pretty
    assert gone.status_code == 404 and "No such job" in gone.text


async def test_bulk_retry_of_ticked_jobs_and_of_every_job_in_a_state(
    memory: InMemoryBackend,
) -> None:
    q = Queue(queue_name(), memory)
    jobs = await failed(q, 3)
    async with client(memory) as c:
        token = await csrf(c, f"/queues/{q.name}?state=failed")
        back = f"/queues/{q.name}?state=failed"
        one = await c.post(
            f"/queues/{q.name}/jobs",
            data={"csrf": token, "action": "retry", "ids": [jobs[0].id], "back": back},
        )
        rest = await c.post(
            f"/queues/{q.name}/jobs",
            data={"csrf": token, "action": "retry", "every": "1", "state": "failed", "back": back},
        )
    assert one.status_code == 303 and "1+job+retried" in one.headers["location"]
    assert "2+jobs+retried" in rest.headers["location"]
    assert (await q.counts())[JobState.WAITING] == 3


async def test_queue_actions_pause_resume_drain(memory: InMemoryBackend) -> None:
    q = Queue(queue_name(), memory)
    await waiting(q, 2)
    async with client(memory) as c:
        token = await csrf(c, f"/queues/{q.name}")
        url = f"/queues/{q.name}/actions"
        await c.post(url, data={"csrf": token, "action": "pause"})
        assert await q.is_paused()
        await c.post(url, data={"csrf": token, "action": "resume"})
        assert not await q.is_paused()
        drained = await c.post(url, data={"csrf": token, "action": "drain"})
        bad = await c.post(url, data={"csrf": token, "action": "explode"})
    assert "2+waiting+and+delayed+jobs" in drained.headers["location"]
    assert (await q.counts()).get(JobState.WAITING, 0) == 0
    assert bad.status_code == 400 and "unknown queue action" in bad.text


async def test_the_dlq_page_replays_and_purges(memory: InMemoryBackend) -> None:
    q = Queue(queue_name(), memory)
    jobs = await failed(q, 3)
    async with client(memory) as c:
        page = (await c.get("/dlq")).text
        token = await csrf(c, "/dlq")
        replay = await c.post(
            "/dlq/actions",
            data={"csrf": token, "queue": q.name, "action": "replay", "ids": [jobs[0].id]},
        )
        purge = await c.post(
            "/dlq/actions", data={"csrf": token, "queue": q.name, "action": "purge", "every": "1"}
        )
    assert all(j.id in page for j in jobs) and "ValueError: card declined" in page
    assert "1+job+of" in replay.headers["location"] and "replayed" in replay.headers["location"]
    assert "2+jobs+of" in purge.headers["location"]
    counts = await q.counts()
    assert (counts.get(JobState.WAITING), counts.get(JobState.FAILED, 0)) == (1, 0)


async def test_a_post_without_the_csrf_value_changes_nothing(memory: InMemoryBackend) -> None:
    q = Queue(queue_name(), memory)
    jobs = await failed(q, 1)
    async with client(memory) as c:
        await csrf(c, "/dlq")  # the browser has the cookie; a forged form lacks the value
        forged = await c.post(
            "/dlq/actions", data={"queue": q.name, "action": "purge", "every": "1"}
        )
        wrong = await c.post(
            "/dlq/actions", data={"csrf": "guess", "queue": q.name, "action": "purge", "every": "1"}
        )
    assert forged.status_code == wrong.status_code == 403
    assert (await q.get_job(jobs[0].id)) is not None


async def test_with_a_token_nothing_is_readable_or_writable_without_signing_in(
    memory: InMemoryBackend,
) -> None:
    q = Queue(queue_name(), memory)
    jobs = await failed(q, 1)
    async with client(memory, token="s3cret") as c:
        page = await c.get(f"/queues/{q.name}")
        assert page.status_code == 303 and "/login?next=" in page.headers["location"]
        for path in ("/events", "/metrics"):
            assert (await c.get(path)).status_code == 401
        token = await csrf(c, "/login")
        post = await c.post(
            "/dlq/actions", data={"csrf": token, "queue": q.name, "action": "purge", "every": "1"}
        )
        assert post.status_code == 401 and await q.get_job(jobs[0].id) is not None
        wrong = await c.post("/login", data={"csrf": token, "secret": "guess", "next": "/"})
        assert wrong.status_code == 401 and "not the dashboard" in wrong.text
        signed = await c.post(
            "/login", data={"csrf": token, "secret": "s3cret", "next": f"/queues/{q.name}"}
        )
        assert signed.headers["location"] == f"/queues/{q.name}"
        assert (await c.get(f"/queues/{q.name}")).status_code == 200
        await c.post("/logout", data={"csrf": token})
        assert (await c.get("/")).status_code == 303
    async with client(memory, token="s3cret") as scraper:
        headers = {"Authorization": "Bearer s3cret"}
        assert (await scraper.get("/metrics", headers=headers)).status_code == 200
        assert (await scraper.get("/metrics", headers={"Authorization": "Bearer x"})).is_error


async def test_a_password_signs_in_but_is_no_bearer_token(memory: InMemoryBackend) -> None:
    async with client(memory, password="pw") as c:
        assert (await c.get("/", headers={"Authorization": "Bearer pw"})).status_code == 303
        token = await csrf(c, "/login")
        offsite = await c.post(
            "/login", data={"csrf": token, "secret": "pw", "next": "//evil.example/"}
        )
        assert offsite.headers["location"] == "http://dash/"  # never redirected off the site
        assert (await c.get("/")).status_code == 200


def test_serving_beyond_loopback_needs_a_secret() -> None:
    assert exposure_problem("127.0.0.1", Access()) is None
    assert exposure_problem("::1", Access()) is None
    assert exposure_problem("localhost", Access()) is None
    assert "not a loopback address" in (exposure_problem("0.0.0.0", Access()) or "")
    assert exposure_problem("0.0.0.0", Access(password="pw")) is None
    result = CliRunner().invoke(cli, ["dashboard", "--backend", "memory://", "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "not a loopback address" in result.output


async def test_metrics_are_served_by_the_same_app(memory: InMemoryBackend) -> None:
    q = Queue(queue_name(), memory)
    await waiting(q, 2)
    async with client(memory) as c:
        text = (await c.get("/metrics")).text
    assert f'relaymq_queue_jobs{{queue="{q.name}",state="waiting"}} 2.0' in text


async def test_the_workers_page_lists_a_running_worker(memory: InMemoryBackend) -> None:
    q = Queue(queue_name(), memory)
    worker = Worker(memory, [q.name])
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.started.wait(), 10)
        async with client(memory) as c:
            page = (await c.get("/workers")).text
    finally:
        worker.stop()
        await running
    assert worker.id in page and q.name in page


@pytest.mark.parametrize("path", ["/", "/dlq", "/workers", "/login"])
async def test_every_page_renders_with_nothing_stored(memory: InMemoryBackend, path: str) -> None:
    async with client(memory) as c:
        r = await c.get(path)
    assert r.status_code == 200 and "relaymq" in r.text
    assert ERROR not in r.text


async def test_mounted_under_a_path_its_links_and_actions_stay_under_it(
    memory: InMemoryBackend,
) -> None:
    q = Queue(queue_name(), memory)
    await failed(q, 1)
    outer = Starlette(routes=[Mount("/ops/relaymq", create_app(memory))])
    transport = httpx.ASGITransport(app=outer)
    async with httpx.AsyncClient(transport=transport, base_url="http://site") as c:
        page = (await c.get("/ops/relaymq/dlq")).text
        assert f'href="http://site/ops/relaymq/queues/{q.name}"' in page
        assert 'action="http://site/ops/relaymq/dlq/actions"' in page
        assert 'src="http://site/ops/relaymq/static/dashboard.js"' in page
        assert (await c.get("/ops/relaymq/static/dashboard.js")).status_code == 200
        token = await csrf(c, "/ops/relaymq/dlq")
        replay = await c.post(
            "/ops/relaymq/dlq/actions",
            data={
                "csrf": token,
                "queue": q.name,
                "action": "replay",
                "every": "1",
                "back": "/ops/relaymq/dlq",
            },
        )
    assert replay.headers["location"].startswith("/ops/relaymq/dlq?done=1+job")


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/queues/bad%20name!", "queue name"),
        ("/queues/q?state=bogus", "bogus"),
        ("/queues/q?page=abc", "abc"),
    ],
)
async def test_bad_input_in_a_url_is_a_clear_400(
    memory: InMemoryBackend, path: str, says: str
) -> None:
    async with client(memory) as c:
        r = await c.get(path)
    assert r.status_code == 400 and says in r.text


async def test_a_backend_that_goes_away_is_a_503_and_it_serves_again_when_back(
    tmp_path: Path,
) -> None:
    from relaymq.backends import connect

    server = PrivateRedis(tmp_path / "redis")
    server.start()
    backend = await connect(f"{server.url}?prefix=dash-down")
    try:
        await Queue("emails", backend).add(add.call(1, 1))
        async with client(backend) as c:
            server.kill()
            down = await c.get("/")
            server.start()

            async def served() -> bool:
                return (await c.get("/")).status_code == 200

            await poll_until(served, "the dashboard serving again", within=20)
            back = await c.get("/")
    finally:
        await backend.close()
        server.kill()
    assert down.status_code == 503 and "cannot be reached" in down.text, down.text
    assert 'data-count="emails:waiting">1<' in back.text  # persisted, and served again


async def test_the_schedules_page_lists_and_acts_on_schedules(memory: InMemoryBackend) -> None:
    q = queue_name()
    book = Schedules(memory)
    await book.add(
        define(add, id=f"{q}-nightly", cron="0 2 * * *", tz="Europe/Berlin", args=(1, 2), queue=q)
    )
    sid = f"{q}-nightly"
    async with client(memory) as c:
        page = (await c.get("/schedules")).text
        token = await csrf(c, "/schedules")

        async def act(action: str, schedule_id: str = sid) -> str:
            form = {"csrf": token, "id": schedule_id, "action": action, "back": "/schedules"}
            r = await c.post("/schedules/actions", data=form)
            assert r.status_code == 303, r.text
            return str(r.headers["location"])

        assert "schedule+" in await act("pause") and (await book.get(sid)).paused
        assert "paused" in (await c.get("/schedules")).text
        await act("resume")
        assert not (await book.get(sid)).paused
        ran = await act("run-now")
        assert "enqueued+job" in ran
        assert (await Queue(q, memory).counts())[JobState.WAITING] == 1
        assert "no+schedule" in await act("pause", "nope")
        await act("remove")
        refused = await c.post(
            "/schedules/actions", data={"csrf": token, "id": sid, "action": "explode"}
        )
    assert sid in page and "cron 0 2 * * * Europe/Berlin" in page and "[1,2]" in page
    assert await book.list() == []
    assert refused.status_code == 400 and "unknown action" in refused.text


AWKWARD_IDS = [
    "reports/2024",
    "reports/daily@2026-12-05T02:30:00+00:00",
    "50%off",
    "what?now",
    "a#b",
    "with space",
    "ünï/cødé",
    "a/../b",
    "..",
    ".",
    "/lead",
    "trail/",
]


async def test_every_id_the_api_accepts_has_a_working_page_and_link(backend: Backend) -> None:
    """Ids with '/', '%', '?', '#', spaces, dots and unicode: the dead-letter page, the queue
    page and each job's page answer 200, and each job's link and action form reach that job."""
    q = Queue(queue_name(), backend)
    for job_id in AWKWARD_IDS:
        await q.add(add.with_options(queue=q.name, job_id=job_id).call(1, 2))
    batch = await backend.claim([q.name], "w-test", len(AWKWARD_IDS))
    assert len(batch.jobs) == len(AWKWARD_IDS)
    await backend.settle([Settle(j.claim, Outcome.FAIL, error=ERROR) for j in batch.jobs])
    async with client(backend) as c:
        dlq = await c.get("/dlq")
        listing = await c.get(f"/queues/{q.name}?state=failed")
        assert (dlq.status_code, listing.status_code) == (200, 200), dlq.text + listing.text
        links = re.findall(r'<a href="([^"]+)">([^<]*)</a>', listing.text)
        hrefs = {html.unescape(text): html.unescape(href) for href, text in links}
        for job_id in AWKWARD_IDS:
            page = await c.get(hrefs[job_id])
            assert page.status_code == 200, (job_id, hrefs[job_id], page.text)
            assert f'data-job="{html.escape(job_id)}"' in page.text, job_id
            found = await c.get(f"/queues/{q.name}", params={"id": job_id})
            assert (await c.get(found.headers["location"])).status_code == 200, job_id
            action = re.search(
                r'<form method="post" action="([^"]+)"', page.text.split('id="job-details"')[1]
            )
            assert action, job_id
            token = c.cookies["relaymq_csrf"]
            retried = await c.post(
                html.unescape(action.group(1)), data={"csrf": token, "action": "retry"}
            )
            assert retried.status_code == 303, (job_id, retried.text)
            assert (await c.get(retried.headers["location"])).status_code == 200, job_id
            job = await q.get_job(job_id)
            assert job is not None and job.state is JobState.WAITING, job_id


@pytest.mark.parametrize("page", ["99999999999999999999999", "0", "-3", "1e3", "abc"])
async def test_a_page_number_out_of_range_is_a_one_line_400(backend: Backend, page: str) -> None:
    """On every backend (SQLite overflowed its integer, Redis's Lua refused the number)."""
    q = Queue(queue_name(), backend)
    await waiting(q, 1)
    async with client(backend) as c:
        r = await c.get(f"/queues/{q.name}", params={"state": "waiting", "page": page})
        last = await c.get(f"/queues/{q.name}", params={"page": "10000000"})
    assert r.status_code == 400, r.text
    assert r.text.count("\n") == 0 and "page must be a whole number from 1 to" in r.text
    assert repr(page) in r.text
    assert last.status_code == 200 and "No waiting jobs" in last.text


async def test_a_job_page_offers_only_the_actions_that_apply_and_says_why_not(
    memory: InMemoryBackend,
) -> None:
    q = Queue(queue_name(), memory)
    [dead] = await failed(q, 1)
    [live] = await waiting(q, 1)
    done = await q.add(add.with_options(queue=q.name).call(1, 1))
    batch = await memory.claim([q.name], "w-test", 5)
    [claimed] = [j for j in batch.jobs if j.id == done.id]
    await memory.settle([Settle(claimed.claim, Outcome.COMPLETE, result=b"2")])
    async with client(memory) as c:
        ids = {"failed": dead.id, "waiting": live, "completed": done.id}
        pages = {name: (await c.get(f"/queues/{q.name}/jobs/{i}")).text for name, i in ids.items()}
        token = c.cookies["relaymq_csrf"]
        refused = await c.post(
            f"/queues/{q.name}/jobs/{done.id}", data={"csrf": token, "action": "retry"}
        )
        said = (await c.get(refused.headers["location"])).text
        failed_tab = (await c.get(f"/queues/{q.name}?state=failed")).text
        waiting_tab = (await c.get(f"/queues/{q.name}?state=waiting")).text
    buttons = {
        name: re.findall(r'<button name="action" value="(\w+)"', page)
        for name, page in pages.items()
    }
    assert buttons == {
        "failed": ["retry", "remove"],
        "waiting": ["cancel", "remove"],
        "completed": ["remove"],
    }
    assert (
        f"job {done.id} is completed: only failed, expired or cancelled jobs can be retried"
    ) in html.unescape(said)
    bulk = {
        tab: re.findall(r'<button name="action" value="(\w+)"', page.split('id="jobs"')[1])
        for tab, page in (("failed", failed_tab), ("waiting", waiting_tab))
    }
    assert bulk == {"failed": ["retry", "remove"], "waiting": ["cancel", "remove"]}


async def test_the_overview_rates_failed_jobs_over_ended_jobs(memory: InMemoryBackend) -> None:
    """23 of 290 ended jobs failed for good, after 44 retried attempts: 7.9% of jobs failed
    (not 21.2%, which counted the retried attempts as failures)."""
    q = Queue(queue_name(), memory)
    await waiting(q, 1)
    minute = int(time.time() // 60)
    await memory.add_tallies([Tally(q.name, minute, completed=267, retried=44, failed=23)])
    async with client(memory) as c:
        page = (await c.get("/")).text
    assert "267 done, 23 failed (7.9% of ended jobs), 44 attempts retried" in page
    assert "21.2" not in page


async def test_task_search_matches_a_part_of_the_task_name(backend: Backend) -> None:
    q = Queue(queue_name(), backend)
    ids = await waiting(q, 3)
    async with client(backend) as c:
        part = (await c.get(f"/queues/{q.name}", params={"task": "add"})).text
        whole = (await c.get(f"/queues/{q.name}", params={"task": "tests.tasks:add"})).text
        none = (await c.get(f"/queues/{q.name}", params={"task": "charge"})).text
        token = c.cookies["relaymq_csrf"]
        cancelled = await c.post(
            f"/queues/{q.name}/jobs",
            data={
                "csrf": token,
                "action": "cancel",
                "every": "1",
                "state": "waiting",
                "task": "ks:ad",
                "back": f"/queues/{q.name}",
            },
        )
    assert all(i in part and i in whole for i in ids)
    assert not any(i in none for i in ids) and "No waiting jobs" in none
    assert "3+jobs+cancelled" in cancelled.headers["location"]
