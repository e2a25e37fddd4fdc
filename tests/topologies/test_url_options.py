"""One rule for URL options on every backend: relaymq's own options and the ones the driver
documents are accepted; any other name is a ``ConfigError`` (exit 2 on the command line) that
names it and lists the options that exist. Several hosts are read where a topology has them."""

from __future__ import annotations

from pathlib import Path

import pytest

from relaymq.backends import from_url
from relaymq.backends.postgres import PostgresBackend
from relaymq.backends.redis.config import parse_url
from relaymq.cli import main
from relaymq.errors import ConfigError

STORE = "memory%3A%2F%2F"


@pytest.mark.parametrize(
    ("url", "unknown", "listed"),
    [
        ("postgresql://h/db?shema=app", "shema", "schema"),
        ("redis://h:6379/0?prefx=a", "prefx", "prefix"),
        ("redis+sentinel://h:26379/svc?bogus=1", "bogus", "wait_replicas"),
        ("mongodb://h/db?replicaSett=rs0", "replicaSett", "replicaset"),
        ("sqlite:///x.db?busytimeout=3", "busytimeout", "busy_timeout"),
        (f"amqp://h/?store={STORE}&queue_typ=quorum", "queue_typ", "queue_type"),
    ],
)
def test_an_unknown_option_names_the_options_that_exist(
    url: str, unknown: str, listed: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=f"option.* {unknown}: .*{listed}"):
        from_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@h1:5432,h2:5433/db?target_session_attrs=read-write&sslmode=disable"
        "&schema=app&pooler=transaction&poll_interval=0.5",
        "redis://h:6379/0?socket_timeout=2&health_check_interval=5&prefix=a",
        "rediss+sentinel://u:pw@s1:26379,s2:26380/mymaster/2?ssl_cert_reqs=none&wait_replicas=1",
        "mongodb://h1,h2/db?replicaSet=rs0&authSource=admin&tls=false&W=majority",
        "sqlite:///x.db?synchronous=full&busy_timeout=3",
        f"amqp://u:p@h1:5672,h2:5673/vhost?store={STORE}&heartbeat=10&queue_type=quorum",
    ],
)
def test_our_options_and_the_drivers_are_accepted(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    from_url(url)


def test_the_command_line_exits_2_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", "--backend", "redis://127.0.0.1:6379/0?bogus=1"]) == 2
    err = capsys.readouterr().err
    assert "unknown Redis URL option bogus" in err and "prefix" in err


def test_hosts_of_failover_urls() -> None:
    pg = PostgresBackend("postgresql://u@h1:5432,h2/db?target_session_attrs=primary")
    assert pg.options.where == "h1:5432,h2:5432"
    s = parse_url("redis+sentinel://s1:26379,s2/mymaster/3?wait_replicas=1&wait_timeout=0.5")
    assert (s.service, s.startup_nodes, s.wait_replicas) == (
        "mymaster",
        (("s1", 26379), ("s2", 26379)),
        1,
    )
    assert s.client_url == "redis://sentinel/3"
    with pytest.raises(ConfigError, match="names its service"):
        parse_url("redis+sentinel://s1:26379")
    with pytest.raises(ConfigError, match="not a Redis Cluster"):
        parse_url("redis+cluster://a:7101?wait_replicas=1")
    with pytest.raises(ConfigError, match="bad port"):
        from_url("postgresql://h1:5432,h2:x/db")
