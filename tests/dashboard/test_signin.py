"""Signing in: failed secrets and bad Bearer tokens slow a client down, sessions end when the
server says so (logout, a new session key, a rotation), and the page shows only messages the
dashboard itself wrote."""

from __future__ import annotations

import html
import re
from pathlib import Path

import httpx
from click.testing import CliRunner

from relaymq import Queue
from relaymq.backends.memory import InMemoryBackend
from relaymq.cli.app import cli
from relaymq.dashboard import Throttle
from relaymq.testing import FakeClock
from tests.dashboard.support import client, csrf, failed
from tests.support.jobs import queue_name
from tests.tasks import add


async def sign_in(c: httpx.AsyncClient, secret: str) -> httpx.Response:
    token = await csrf(c, "/login")
    return await c.post("/login", data={"csrf": token, "secret": secret, "next": "/"})


async def test_failed_sign_ins_are_answered_429_with_a_growing_wait(
    memory: InMemoryBackend, clock: FakeClock
) -> None:
    throttle = Throttle(free=3, delay=10, clock=clock)
    async with client(memory, password="pw", throttle=throttle) as c:
        for _ in range(3):
            assert (await sign_in(c, "guess")).status_code == 401
        blocked = await sign_in(c, "pw")  # even the right secret waits
        assert blocked.status_code == 429 and blocked.headers["retry-after"] == "10"
        assert "Too many failed sign-ins" in blocked.text
        clock.advance(10)
        assert (await sign_in(c, "guess")).status_code == 401  # a fourth failure: 20 s
        assert (await sign_in(c, "pw")).headers["retry-after"] == "20"
        clock.advance(20)
        signed = await sign_in(c, "pw")
        assert signed.status_code == 303
        assert (await c.get("/")).status_code == 200
        c.cookies.clear()
        assert (await sign_in(c, "guess")).status_code == 401  # success forgot the failures


async def test_bad_bearer_tokens_are_throttled_per_client(
    memory: InMemoryBackend, clock: FakeClock
) -> None:
    throttle = Throttle(free=2, delay=5, clock=clock)
    app_options = {"token": "t0ken", "throttle": throttle}
    async with client(memory, **app_options) as c:
        bad = {"Authorization": "Bearer nope"}
        assert (await c.get("/metrics", headers=bad)).status_code == 401
        assert (await c.get("/", headers=bad)).status_code == 303  # to the login form
        refused = await c.get("/metrics", headers={"Authorization": "Bearer t0ken"})
        assert refused.status_code == 429 and refused.headers["retry-after"] == "5"
        other = httpx.ASGITransport(app=c._transport.app, client=("10.0.0.9", 1234))  # type: ignore[attr-defined]
        async with httpx.AsyncClient(transport=other, base_url="http://dash") as elsewhere:
            fine = await elsewhere.get("/metrics", headers={"Authorization": "Bearer t0ken"})
        assert fine.status_code == 200  # another client is not slowed
        proxied = await c.get("/", headers={"Authorization": "Basic eDp5"})  # not a token try
        assert proxied.status_code == 303
        clock.advance(5)
        assert (await c.get("/metrics", headers={"Authorization": "Bearer t0ken"})).is_success


async def test_logging_out_ends_the_session_on_the_server(memory: InMemoryBackend) -> None:
    async with client(memory, password="pw") as c:
        await sign_in(c, "pw")
        stolen = c.cookies["relaymq_session"]
        token = c.cookies["relaymq_csrf"]
        assert (await c.get("/")).status_code == 200
        await c.post("/logout", data={"csrf": token})
        c.cookies.set("relaymq_session", stolen)  # a copy kept from before the logout
        assert (await c.get("/")).status_code == 303


async def test_a_new_session_key_or_a_rotation_ends_every_session(
    memory: InMemoryBackend, tmp_path: Path
) -> None:
    key_file = tmp_path / "session.key"
    async with client(memory, password="pw", session_key_file=key_file) as c:
        await sign_in(c, "pw")
        cookie = c.cookies["relaymq_session"]
        assert (await c.get("/")).status_code == 200
    assert key_file.stat().st_mode & 0o077 == 0  # created, readable by its owner only
    async with client(memory, password="pw", session_key_file=key_file) as restarted:
        restarted.cookies.set("relaymq_session", cookie)
        assert (await restarted.get("/")).status_code == 200  # same key: still signed in
        result = CliRunner().invoke(
            cli,
            [
                "dashboard",
                "--backend",
                "memory://",
                "--session-key-file",
                str(key_file),
                "--rotate-sessions",
            ],
        )
        assert result.exit_code == 0, result.output
        assert "every session" in result.output
        assert (await restarted.get("/")).status_code == 303  # the running app sees it
    async with client(memory, password="pw") as fresh:  # no key file: a key per start
        fresh.cookies.set("relaymq_session", cookie)
        assert (await fresh.get("/")).status_code == 303
    refused = CliRunner().invoke(cli, ["dashboard", "--backend", "memory://", "--rotate-sessions"])
    assert refused.exit_code == 2 and "--session-key-file" in refused.output


async def test_the_page_shows_only_messages_the_dashboard_wrote(memory: InMemoryBackend) -> None:
    q = Queue(queue_name(), memory)
    jobs = await failed(q, 1)
    async with client(memory) as c:
        token = await csrf(c, "/dlq")
        replay = await c.post(
            "/dlq/actions",
            data={
                "csrf": token,
                "queue": q.name,
                "action": "replay",
                "ids": [jobs[0].id],
                "back": "/dlq",
            },
        )
        shown = (await c.get(replay.headers["location"])).text
        forged = (
            await c.get("/dlq", params={"done": "Session expired: sign in at evil.example"})
        ).text
        altered = replay.headers["location"].replace("1+job", "9+jobs")
        tampered = (await c.get(altered)).text
    assert re.search(r'role="status">1 job of \S+ replayed<', shown)
    assert "evil.example" not in forged and 'role="status"' not in forged
    assert "9 jobs" not in tampered and 'role="status"' not in tampered


async def test_signing_in_returns_to_the_job_page_asked_for(memory: InMemoryBackend) -> None:
    q = Queue(queue_name(), memory)
    await q.add(add.with_options(queue=q.name, job_id="a/b?c").call(1, 2))
    async with client(memory, password="pw") as c:
        asked = await c.get(f"/queues/{q.name}/jobs/a%2Fb%3Fc")
        assert asked.status_code == 303
        login = (await c.get(asked.headers["location"])).text
        token = c.cookies["relaymq_csrf"]
        found = re.search(r'name="next" value="([^"]*)"', login)
        assert found
        signed = await c.post(
            "/login", data={"csrf": token, "secret": "pw", "next": html.unescape(found.group(1))}
        )
        page = await c.get(signed.headers["location"])
    assert page.status_code == 200 and 'data-job="a/b?c"' in page.text


def test_a_session_key_file_that_holds_no_key_is_refused_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "session.key"
    bad.write_text("not a key\n")
    result = CliRunner().invoke(
        cli, ["dashboard", "--backend", "memory://", "--session-key-file", str(bad)]
    )
    assert result.exit_code == 2 and "holds no session key" in result.output
    inside_a_file = tmp_path / "file" / "session.key"
    (tmp_path / "file").write_text("")
    result = CliRunner().invoke(
        cli, ["dashboard", "--backend", "memory://", "--session-key-file", str(inside_a_file)]
    )
    assert result.exit_code == 2 and "cannot use the session key file" in result.output
