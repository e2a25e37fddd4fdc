"""``relaymq dashboard``: serve the web dashboard over one backend."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Iterator
from pathlib import Path

import click

from relaymq.cli.common import ConfigProblem, Unreachable, backend_option
from relaymq.errors import BackendUnavailableError, ConfigError

log = logging.getLogger("relaymq.dashboard")


@click.command("dashboard")
@backend_option
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    envvar="RELAYMQ_DASHBOARD_HOST",
    show_envvar=True,
    help="Address to listen on.",
)
@click.option(
    "--port",
    default=8080,
    show_default=True,
    type=click.IntRange(0, 65535),
    envvar="RELAYMQ_DASHBOARD_PORT",
    show_envvar=True,
)
@click.option(
    "--token",
    envvar="RELAYMQ_DASHBOARD_TOKEN",
    show_envvar=True,
    help="Sign-in secret, also accepted as 'Authorization: Bearer <token>'.",
)
@click.option(
    "--password",
    envvar="RELAYMQ_DASHBOARD_PASSWORD",
    show_envvar=True,
    help="Sign-in secret for the login form.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    envvar="RELAYMQ_DASHBOARD_ALLOWED_HOSTS",
    show_envvar=True,
    help="Another Host name it answers to (repeatable; '*': any, when a proxy in "
    "front checks it). It answers to the --host name, and on a loopback "
    "address to localhost, 127.0.0.1 and [::1].",
)
@click.option(
    "--session-key-file",
    type=click.Path(dir_okay=False),
    envvar="RELAYMQ_DASHBOARD_SESSION_KEY_FILE",
    show_envvar=True,
    help="Keep the key that signs sessions in this file (created if missing), so "
    "restarts and processes sharing it share sessions. Without it, every start "
    "has a new key: a restart ends every session.",
)
@click.option(
    "--rotate-sessions",
    is_flag=True,
    envvar="RELAYMQ_DASHBOARD_ROTATE_SESSIONS",
    show_envvar=True,
    help="Write a new key to --session-key-file and exit: every session of every "
    "dashboard using the file ends at its next request.",
)
def dashboard(
    backend: str,
    host: str,
    port: int,
    token: str | None,
    password: str | None,
    allowed_hosts: tuple[str, ...],
    session_key_file: str | None,
    rotate_sessions: bool,
) -> None:
    """Serve the web dashboard: queues, jobs, dead letters, workers, live, with actions.

    Anywhere but a loopback address it needs --token or --password. It answers only to the
    Host names it is served under (a DNS-rebinding page gets a 400): add names, such as the
    one a proxy forwards, with --allowed-host."""
    try:
        import uvicorn  # noqa: F401

        from relaymq.dashboard import Access, allowed_hosts_for, exposure_problem
        from relaymq.dashboard.security import SessionKey, write_key
    except ImportError as e:
        raise ConfigProblem(f"{e} (the dashboard: pip install 'relaymq[dashboard]')") from e
    if rotate_sessions:
        if not session_key_file:
            raise ConfigProblem(
                "--rotate-sessions needs --session-key-file (without one, the key is new at "
                "every start: a restart ends every session)"
            )
        try:
            write_key(Path(session_key_file))
        except OSError as e:
            raise ConfigProblem(f"cannot write the session key: {e}") from e
        click.echo(
            f"a new session key is in {session_key_file}: every session of every "
            "dashboard using it has ended"
        )
        return
    problem = exposure_problem(host, Access(token, password))
    if problem:
        raise ConfigProblem(problem)
    allowed = allowed_hosts_for(host, allowed_hosts)
    if session_key_file:
        try:
            SessionKey(session_key_file)  # refused before serving, not at each request
        except OSError as e:
            raise ConfigProblem(f"cannot use the session key file: {e}") from e
        except ConfigError as e:
            raise ConfigProblem(str(e)) from e
    try:
        asyncio.run(_serve(backend, host, port, token, password, allowed, session_key_file))
    except ConfigError as e:
        raise ConfigProblem(str(e)) from e
    except BackendUnavailableError as e:
        raise Unreachable(str(e)) from e


async def _serve(
    url: str,
    host: str,
    port: int,
    token: str | None,
    password: str | None,
    allowed: frozenset[str] | None,
    key_file: str | None,
) -> None:
    import uvicorn

    class Server(uvicorn.Server):
        """Stopped by our own signal handlers: uvicorn's would raise the signal again after
        its graceful shutdown, and the command would not exit 0."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        def stop(self) -> None:
            self.should_exit = True

    from relaymq.app import App
    from relaymq.backends import from_url
    from relaymq.dashboard import create_app

    backend = from_url(url)
    backend.create_missing = False
    await backend.connect()
    try:
        app = create_app(
            App(url, backend=backend),
            token=token,
            password=password,
            allowed_hosts=allowed,
            session_key_file=key_file,
        )
        server = Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):  # a graceful stop, then exit code 0
            loop.add_signal_handler(sig, server.stop)
        log.info(
            "dashboard at http://%s:%d/ over %s, answering to Host %s",
            host,
            port,
            backend.url,
            "any name" if allowed is None else ", ".join(sorted(allowed)),
        )
        await server.serve()
    finally:
        await backend.close()
