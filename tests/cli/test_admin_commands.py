"""The operator commands (queue, job, dlq, workers, stats) against real backends (SQLite and
Redis): what they print, what they change, and their exit codes for bad input."""

from __future__ import annotations

import asyncio
import re
import socket
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson
import pytest
from click.testing import CliRunner

from relaymq import connect, registry
from relaymq.backends.base import Backend
from relaymq.cli import main
from relaymq.cli.app import cli
from relaymq.instrumented import Instrumented
from relaymq.records.store import Outcome, Settle, WorkerInfo
from tests.support.blackhole import black_hole
from tests.support.jobs import new_job, queue_name

T = TypeVar("T")
Capture = pytest.CaptureFixture[str]


def on(url: str, fn: Callable[[Backend], Awaitable[T]]) -> T:
    """Run ``fn`` on a connected backend (test set-up and checks, not the CLI)."""

    async def go() -> T:
        backend = await connect(url)
        try:
            return await fn(backend)
        finally:
            await backend.close()

    return asyncio.run(go())


async def seed(b: Backend, q: str) -> None:
    """In ``q``: f1, f2 (task m:a) and f3 (task m:b) failed; a1 active; w1, w2 waiting."""
    await b.enqueue(
        [
            new_job(q, i, task=t)
            for i, t in (("f1", "m:a"), ("f2", "m:a"), ("f3", "m:b"), ("a1", "m:a"))
        ]
    )
    claimed = (await b.claim([q], "wk-1", 4)).jobs
    assert len(claimed) == 4
    await b.settle([Settle(j.claim, Outcome.FAIL, error="boom") for j in claimed[:3]])
    await b.enqueue([new_job(q, "w1", task="m:a"), new_job(q, "w2", task="m:b")])


def states(url: str, q: str, *ids: str) -> list[str | None]:
    async def read(b: Backend) -> list[str | None]:
        return [None if j is None else j.state.value for j in await b.get_jobs(q, ids)]

    return on(url, read)


def cli_json(argv: list[str], capsys: Capture) -> Any:
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    return orjson.loads(capsys.readouterr().out)


def one_error_line(capsys: Capture) -> str:
    """The one line of the error on stderr; the log line relaymq writes before it about a
    test server that keeps nothing on disk (``DurabilityWarning``) is not part of it."""
    lines = [
        line
        for line in capsys.readouterr().err.strip().splitlines()
        if " WARNING relaymq: Redis appendonly is off" not in line
    ]
    err = "\n".join(lines)
    assert "Traceback" not in err and len(lines) == 1, err
    return err


# -- queue ------------------------------------------------------------------------------------


def test_queue_list_info_pause_resume(url: str, capsys: Capture) -> None:
    q = queue_name()
    on(url, lambda b: seed(b, q))
    b = ["--backend", url]
    [row] = [r for r in cli_json(["queue", "list", *b], capsys) if r["queue"] == q]
    assert (row["failed"], row["active"], row["waiting"], row["paused"]) == (3, 1, 2, False)
    assert cli_json(["queue", "pause", q, *b], capsys) == {"queue": q, "paused": True}
    info = cli_json(["queue", "info", q, *b], capsys)
    assert (info["paused"], info["failed"], info["workers"]) == (True, 3, [])
    assert main(["queue", "resume", q, *b]) == 0
    assert f"queue {q!r} resumed" in capsys.readouterr().out
    assert cli_json(["queue", "info", q, *b], capsys)["paused"] is False
    assert main(["queue", "list", *b]) == 0
    assert q in capsys.readouterr().out


def test_destructive_queue_commands_ask_unless_yes(url: str) -> None:
    q = queue_name()
    on(url, lambda b: seed(b, q))
    runner = CliRunner()
    b = ["--backend", url]
    declined = runner.invoke(cli, ["queue", "drain", q, *b], input="n\n")
    assert declined.exit_code == 1 and "nothing changed" in declined.output
    assert states(url, q, "w1") == ["waiting"]
    agreed = runner.invoke(cli, ["queue", "drain", q, *b, "--json"], input="y\n")
    assert agreed.exit_code == 0, agreed.output
    assert '"removed":2' in agreed.output
    cleaned = runner.invoke(cli, ["queue", "clean", q, "--state", "failed", "--yes", *b])
    assert cleaned.exit_code == 0 and "deleted 3 failed jobs" in cleaned.output
    gone = runner.invoke(cli, ["queue", "obliterate", q, "-y", *b])
    assert gone.exit_code == 0, gone.output
    assert states(url, q, "a1") == [None]
    assert runner.invoke(cli, ["queue", "info", q, *b]).exit_code == 1  # no such queue now


# -- job --------------------------------------------------------------------------------------


def test_job_list_filters_and_pages(url: str, capsys: Capture) -> None:
    q = queue_name()
    on(url, lambda b: seed(b, q))
    b = ["--backend", url]
    failed = cli_json(["job", "list", q, "--state", "failed", *b], capsys)
    assert [j["id"] for j in failed] == ["f1", "f2", "f3"]
    of_a = cli_json(["job", "list", q, "-s", "failed", "--task", "m:a", *b], capsys)
    assert [j["id"] for j in of_a] == ["f1", "f2"]
    page = cli_json(["job", "list", q, "-s", "failed", "--offset", "1", "--limit", "1", *b], capsys)
    assert [j["id"] for j in page] == ["f2"]
    assert cli_json(["job", "list", q, "-s", "failed", "--older-than", "1h", *b], capsys) == []
    assert [j["id"] for j in cli_json(["job", "list", q, *b], capsys)] == ["w1", "w2"]
    assert main(["job", "list", q, "-s", "failed", *b]) == 0
    assert "boom" in capsys.readouterr().out


def test_job_show(url: str, capsys: Capture) -> None:
    q = queue_name()
    on(url, lambda b: seed(b, q))
    shown = cli_json(["job", "show", q, "f1", "--backend", url], capsys)
    assert (shown["state"], shown["error"], shown["task"]) == ("failed", "boom", "m:a")
    assert shown["payload"] == {"args": [], "kwargs": {}}
    [attempt] = shown["attempt_history"]  # the failed attempt, with its worker and error
    assert (attempt["attempt"], attempt["outcome"], attempt["worker"]) == (1, "fail", "wk-1")
    assert attempt["error"] == "boom" and attempt["ended_at"] >= attempt["started_at"]
    assert main(["job", "show", q, "f1", "--backend", url]) == 0
    table = capsys.readouterr().out
    assert "last 1 attempts" in table and re.search(r"1 +│ failed +│ wk-1 .*│ boom", table)
    assert main(["job", "show", q, "nope", "--backend", url]) == 1
    assert one_error_line(capsys) == f"Error: no job 'nope' in queue {q!r}"


def test_job_retry_cancel_remove_one_and_many(url: str, capsys: Capture) -> None:
    q = queue_name()
    on(url, lambda b: seed(b, q))
    b = ["--backend", url]
    assert cli_json(["job", "retry", q, "f1", *b], capsys)["changed"] == 1
    assert main(["job", "retry", q, "w2", *b]) == 1  # waiting: refused, said why
    assert "is waiting: only failed, expired or cancelled" in one_error_line(capsys)
    assert cli_json(["job", "cancel", q, "a1", *b], capsys)["changed"] == 1
    assert cli_json(["job", "cancel", q, "a1", *b], capsys)["changed"] == 0  # had ended
    # Several ids: all must exist, else nothing changes.
    assert main(["job", "cancel", q, "w1", "nope", "--yes", *b]) == 1
    assert one_error_line(capsys) == f"Error: no job 'nope' in queue {q!r}"
    assert states(url, q, "w1") == ["waiting"]
    assert cli_json(["job", "cancel", q, "w1", "w2", "--yes", *b], capsys)["changed"] == 2
    # A selection: retry the cancelled jobs of task m:a (a1, w1), not w2 (m:b).
    done = cli_json(["job", "retry", q, "-s", "cancelled", "-t", "m:a", "-y", *b], capsys)
    assert done == {"queue": q, "action": "retry", "changed": 2}
    assert states(url, q, "a1", "w1", "w2") == ["waiting", "waiting", "cancelled"]
    assert cli_json(["job", "remove", q, "f2", "f3", "--yes", *b], capsys)["changed"] == 2
    assert states(url, q, "f2", "f3") == [None, None]
    assert cli_json(["job", "remove", q, "--all", "--yes", *b], capsys)["changed"] == 4


def test_bulk_actions_ask_unless_yes(url: str) -> None:
    q = queue_name()
    on(url, lambda b: seed(b, q))
    runner = CliRunner()
    b = ["--backend", url]
    declined = runner.invoke(cli, ["job", "remove", q, "f1", *b], input="n\n")
    assert declined.exit_code == 1 and "Remove job 'f1'" in declined.output
    declined = runner.invoke(cli, ["job", "retry", q, "--all", *b], input="\n")
    assert declined.exit_code == 1
    assert states(url, q, "f1", "f2") == ["failed", "failed"]
    agreed = runner.invoke(cli, ["job", "retry", q, "--all", *b], input="y\n")
    assert agreed.exit_code == 0 and "retried 3 jobs" in agreed.output


# -- dlq --------------------------------------------------------------------------------------


def test_dlq_list_replay_purge(url: str, capsys: Capture) -> None:
    q = queue_name()
    on(url, lambda b: seed(b, q))
    b = ["--backend", url]
    assert [j["id"] for j in cli_json(["dlq", "list", q, *b], capsys)] == ["f1", "f2", "f3"]
    assert [j["id"] for j in cli_json(["dlq", "list", q, "--task", "m:b", *b], capsys)] == ["f3"]
    # Replay by task; a named job outside the DLQ (waiting) is left alone.
    assert cli_json(["dlq", "replay", q, "--task", "m:b", "-y", *b], capsys)["changed"] == 1
    assert cli_json(["dlq", "replay", q, "w1", "-y", *b], capsys)["changed"] == 0
    # Nothing is older than an hour; then everything that is left goes.
    assert cli_json(["dlq", "purge", q, "--older-than", "1h", "-y", *b], capsys)["changed"] == 0
    assert cli_json(["dlq", "purge", q, "--all", "-y", *b], capsys)["changed"] == 2
    assert states(url, q, "f1", "f2", "f3", "w1") == [None, None, "waiting", "waiting"]


# -- workers and stats ------------------------------------------------------------------------


def test_workers_shows_heartbeat_age_and_running_jobs(url: str, capsys: Capture) -> None:
    q = queue_name()

    async def prepare(b: Backend) -> None:
        await seed(b, q)
        await registry.register(b, WorkerInfo("wk-1", (q,), 8, "hostA", 4242, 1.0), ttl=60)

    on(url, prepare)
    [worker] = [w for w in cli_json(["workers", "--backend", url], capsys) if w["id"] == "wk-1"]
    assert (worker["host"], worker["pid"], worker["queues"]) == ("hostA", 4242, [q])
    assert (worker["concurrency"], worker["running"]) == (8, 1)
    assert 0 <= worker["heartbeat_age"] < 60
    assert main(["workers", "--backend", url]) == 0
    assert "hostA" in capsys.readouterr().out


def test_stats_watch_refreshes(url: str, capsys: Capture) -> None:
    q = queue_name()
    on(url, lambda b: seed(b, q))
    argv = ["stats", "--watch", "--interval", "0.1", "--count", "2", "--backend", url, "--json"]
    assert main(argv) == 0
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 2 and all(line["queues"][q]["failed"] == 3 for line in lines)
    assert main([*argv[:-1]]) == 0  # into a pipe (no terminal): one line per refresh
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all(f"{q}: " in line and "failed=3" in line for line in out), out


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["job", "list", "{q}", "--older-than", "abc"], 2, "'abc' is not a duration"),
        (["job", "list", "{q}", "--state", "bogus"], 2, "'bogus' is not one of"),
        (["dlq", "purge", "{q}", "--state", "waiting", "-y"], 2, "'waiting' is not one of"),
        (["job", "retry", "{q}"], 2, "name job ids"),
        (["dlq", "replay", "{q}", "f1", "--all", "-y"], 2, "not both"),
        (["job", "list", "bad name"], 2, "invalid queue name"),
        (["job", "remove", "{q}-typo", "--all", "-y"], 1, "no queue"),
        (["queue", "pause", "{q}-typo"], 1, "no queue"),
        (["job", "watch", "{q}", "nope"], 1, "no job 'nope'"),
        (["dlq", "replay", "{q}", "f1", "nope", "-y"], 1, "no job 'nope'"),
    ],
)
def test_bad_input_is_one_line_with_its_exit_code_and_changes_nothing(
    argv: list[str], code: int, says: str, url: str, capsys: Capture
) -> None:
    q = queue_name()
    on(url, lambda b: seed(b, q))
    before = on(url, lambda b: b.counts(q))
    assert main([a.replace("{q}", q) for a in argv] + ["--backend", url]) == code
    assert says in one_error_line(capsys)
    assert on(url, lambda b: b.counts(q)) == before
    assert on(url, lambda b: b.is_paused(q + "-typo")) is False


def test_read_only_commands_create_no_store(tmp_path: Path, capsys: Capture) -> None:
    missing = tmp_path / "typo.db"
    for argv in (["queue", "list"], ["job", "list", "q"], ["workers"], ["dlq", "list", "q"]):
        assert main([*argv, "--backend", f"sqlite:///{missing}"]) == 2
        assert "no SQLite database" in one_error_line(capsys)
    assert not missing.exists()


def test_every_option_of_every_subcommand_has_an_env_twin_in_help(capsys: Capture) -> None:
    def walk(group: click.Group, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
        for name, command in group.commands.items():
            yield [*path, name], command
            if isinstance(command, click.Group):
                yield from walk(command, [*path, name])

    seen = 0
    for path, command in walk(cli, []):  # type: ignore[arg-type]
        assert main([*path, "--help"]) == 0
        out = re.sub(r"\s+", " ", capsys.readouterr().out)
        for param in command.params:
            if param.param_type_name != "option" or param.name == "help":
                continue
            assert param.envvar, f"relaymq {' '.join(path)} {param.opts[0]} has no env twin"
            assert f"env var: {param.envvar}" in out, f"{param.envvar} not in {path} --help"
            seen += 1
    assert seen > 40


# -- a backend that cannot be reached, and job watch (in a separate process) -----------------


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    "argv",
    [
        ["queue", "list"],
        ["job", "retry", "q", "--all", "-y"],
        ["workers"],
        ["stats", "--watch", "--count", "1"],
        ["dlq", "purge", "q", "--all", "-y"],
    ],
)
@pytest.mark.parametrize("scheme", ["redis", "postgresql"])
def test_a_backend_that_is_down_exits_3(argv: list[str], scheme: str, capsys: Capture) -> None:
    port = closed_port()
    url = (
        f"redis://127.0.0.1:{port}/0"
        if scheme == "redis"
        else (f"postgresql://relaymq@127.0.0.1:{port}/relaymq")
    )
    assert main([*argv, "--backend", url]) == 3
    assert f"127.0.0.1:{port}" in one_error_line(capsys)


async def relaymq(*argv: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relaymq",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_a_server_that_never_answers_exits_3() -> None:
    async with black_hole() as port:
        proc = await relaymq("queue", "list", "--backend", f"redis://127.0.0.1:{port}/0?timeout=1")
        async with asyncio.timeout(30):
            _, err = await proc.communicate()
    assert proc.returncode == 3, err
    assert b"did not answer within 1s" in err and len(err.strip().splitlines()) == 1


async def test_job_watch_follows_the_job_until_it_ends(url: str) -> None:
    q = queue_name()
    backend = await connect(url)
    try:
        ops = Instrumented(backend)
        await ops.enqueue([new_job(q, "watched")])
        proc = await relaymq("job", "watch", q, "watched", "--json", "--backend", url)
        assert proc.stdout is not None
        async with asyncio.timeout(20):
            first = orjson.loads(await proc.stdout.readline())  # subscribed before this line
            assert (first["state"], first["id"]) == ("waiting", "watched")
            [job] = (await ops.claim([q], "wk-9", 1)).jobs
            await ops.flush()
            await ops.settle([(job, Settle(job.claim, Outcome.COMPLETE, result=b"42"))])
            await ops.flush()
            rest, err = await proc.communicate()
    finally:
        await backend.close()
    assert proc.returncode == 0, err
    lines = [orjson.loads(line) for line in rest.splitlines()]
    assert lines[0]["event"] == "job:active" and lines[0]["data"]["worker"] == "wk-9"
    # It ends on the terminal state: its event, or (the event still on its way) a state line.
    assert lines[-1].get("event") == "job:completed" or lines[-1]["state"] == "completed"


async def test_job_watch_of_a_job_that_has_ended_returns_at_once(url: str) -> None:
    q = queue_name()
    await asyncio.to_thread(on, url, lambda b: seed(b, q))
    proc = await relaymq("job", "watch", q, "f1", "--backend", url)
    async with asyncio.timeout(20):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err
    assert out.decode().strip() == "f1: failed (attempt 1/1): boom"


def test_a_listed_error_is_the_tracebacks_last_line() -> None:
    from relaymq.job import error_line

    stored = 'Traceback (most recent call last):\n  File "t.py", line 1\nValueError: k failed\n\n'
    assert error_line(stored) == "ValueError: k failed"
    assert error_line(None) == "" and error_line("boom") == "boom"
