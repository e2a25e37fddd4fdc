"""The Host header: a dashboard answers only to the names it is served under (a DNS-rebinding
page, whose Host is its own name, gets a 400 and changes nothing)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import httpx
import pytest

from relaymq import Queue, connect
from relaymq.backends.memory import InMemoryBackend
from relaymq.cli.dashboard import dashboard
from relaymq.dashboard import allowed_hosts_for
from tests.cli.test_metrics_port import free_port
from tests.dashboard.support import client, csrf, waiting
from tests.support.jobs import queue_name
from tests.support.waiting import poll_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("bind", ["127.0.0.1", "localhost", "::1"])
async def test_a_loopback_dashboard_answers_to_loopback_names_only(
    memory: InMemoryBackend, bind: str
) -> None:
    q = Queue(queue_name(), memory)
    await waiting(q, 1)
    await q.pause()
    async with client(memory, allowed_hosts=allowed_hosts_for(bind)) as c:
        c.headers["Host"] = "localhost:8080"
        token = await csrf(c, f"/queues/{q.name}")
        for host in (
            "localhost",
            "localhost:8080",
            "127.0.0.1",
            "127.0.0.1:8080",
            "[::1]",
            "[::1]:8080",
            "LOCALHOST:8080",
        ):
            r = await c.get("/", headers={"Host": host})
            assert r.status_code == 200, host
        for host in (
            "attacker.example",
            "attacker.example:8080",
            "localhost.attacker.example",
            "127.0.0.1.nip.io:8080",
            "[::2]:8080",
            "localhost:80x",
            "",
        ):
            r = await c.get(f"/queues/{q.name}", headers={"Host": host})
            assert r.status_code == 400 and r.text.count("\n") == 0, host
            assert "Host" in r.text and q.name not in r.text, host
        rebound = await c.post(
            f"/queues/{q.name}/actions",
            data={"csrf": token, "action": "resume"},
            headers={"Host": "attacker.example:8080"},
        )
    assert rebound.status_code == 400 and await q.is_paused()


async def test_another_bind_answers_to_its_name_and_the_allowed_additions(
    memory: InMemoryBackend,
) -> None:
    allowed = allowed_hosts_for("10.1.2.3", ["Dash.Example.com", "[fd00::1]"])
    async with client(memory, allowed_hosts=allowed) as c:
        for host, code in (
            ("10.1.2.3:8080", 200),
            ("dash.example.com", 200),
            ("dash.example.com:443", 200),
            ("[fd00::1]:8080", 200),
            ("localhost:8080", 400),
            ("other.example.com", 400),
        ):
            assert (await c.get("/", headers={"Host": host})).status_code == code, host
    assert allowed_hosts_for("0.0.0.0", ["*"]) is None  # '*': the Host is checked elsewhere
    assert allowed_hosts_for("0.0.0.0", ["dash.example.com"]) == {
        "localhost",
        "127.0.0.1",
        "[::1]",
        "dash.example.com",
    }


async def test_the_command_refuses_other_hosts_and_takes_allowed_hosts_from_env(
    tmp_path: Path,
) -> None:
    url, port = f"sqlite:///{tmp_path}/d.db", free_port()
    backend = await connect(url)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RELAYMQ_DASHBOARD_ALLOWED_HOSTS": "dash.internal ops.internal",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relaymq",
        "dashboard",
        "--backend",
        url,
        "--port",
        str(port),
        cwd=ROOT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base) as c:

            async def serving() -> bool:
                try:
                    return (await c.get("/")).status_code == 200
                except httpx.TransportError:
                    return False

            await poll_until(serving, "the dashboard answering", within=20)
            codes = {
                host: (await c.get("/", headers={"Host": host})).status_code
                for host in (
                    f"localhost:{port}",
                    "dash.internal",
                    "ops.internal:80",
                    "attacker.example",
                )
            }
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        await backend.close()
    assert codes == {
        f"localhost:{port}": 200,
        "dash.internal": 200,
        "ops.internal:80": 200,
        "attacker.example": 400,
    }


def test_allowed_host_is_repeatable_on_the_command_line() -> None:
    context = dashboard.make_context(
        "dashboard", ["--allowed-host", "a.internal", "--allowed-host", "b.internal"]
    )
    assert context.params["allowed_hosts"] == ("a.internal", "b.internal")


PATHS = [
    "/",
    "/dlq",
    "/workers",
    "/schedules",
    "/login",
    "/static/dashboard.js",
    "/queues/bad%20name!",
    "/nope",
]


@pytest.mark.parametrize("path", PATHS)
async def test_every_response_forbids_framing_inline_script_and_referrers(
    memory: InMemoryBackend, path: str
) -> None:
    async with client(memory) as c:
        r = await c.get(path)
    csp = r.headers.get("content-security-policy", "")
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp, (path, csp)
    assert "unsafe-inline" not in csp and "form-action 'self'" in csp
    assert r.headers.get("x-frame-options") == "DENY"
    assert r.headers.get("referrer-policy") == "same-origin"
