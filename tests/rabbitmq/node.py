"""A private RabbitMQ node on 127.0.0.1:5673 for restart tests (services.md section 4).

It has its own node name, ports and data directory, so the shared node on 5672 is untouched.
``kill()`` is a crash (SIGKILL of the VM); ``start()`` brings the node back on the same data.
``name``, ``host``, ``port`` and ``wrap`` (an argv prefix: ``ip netns exec NS``) run another
node on a test host (tests/hosts), where it has that network namespace's epmd to itself.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

PORT = 5673
URL = f"amqp://guest:guest@127.0.0.1:{PORT}/"


def unavailable() -> str | None:
    if shutil.which("rabbitmq-server") is None or shutil.which("rabbitmqctl") is None:
        return "rabbitmq-server is not installed"
    if os.geteuid() != 0:
        return "the private RabbitMQ node is started as root (the Debian wrapper drops to rabbitmq)"
    return None


class PrivateNode:
    def __init__(
        self,
        name: str = f"relaymq{os.getpid()}",
        host: str = "127.0.0.1",
        port: int = PORT,
        wrap: Sequence[str] = (),
    ) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="relaymq-rmq-"))
        self.url = f"amqp://guest:guest@{host}:{port}/"
        self.wrap = list(wrap)
        # The machine's rabbitmq.conf may pin the listener to 5672: give the node its own.
        config = self.dir / "rabbitmq.conf"
        config.write_text(f"listeners.tcp.local = {host}:{port}\nloopback_users = none\n")
        shutil.chown(config, "rabbitmq", "rabbitmq")
        shutil.chown(self.dir, "rabbitmq", "rabbitmq")
        self.env = {
            **os.environ,
            "RABBITMQ_NODENAME": f"{name}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": host,
            "RABBITMQ_NODE_PORT": str(port),
            "RABBITMQ_DIST_PORT": str(port + 20000),
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.dir / "log"),
            "RABBITMQ_PID_FILE": str(self.dir / "pid"),
            "RABBITMQ_CONFIG_FILE": str(config),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    def start(self, within: float = 90.0) -> None:
        subprocess.run(
            [*self.wrap, "rabbitmq-server", "-detached"],
            env=self.env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            ok = subprocess.run(
                [*self.wrap, "rabbitmqctl", "-q", "await_startup", "--timeout", "60"],
                env=self.env,
                capture_output=True,
            )
            if ok.returncode == 0:
                return
            time.sleep(0.5)  # the node is not reachable yet right after -detached
        raise AssertionError(f"private RabbitMQ node not up after {within}s (logs in {self.dir})")

    def pid(self) -> int | None:
        try:
            return int((self.dir / "pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def kill(self) -> None:
        """Crash the node: SIGKILL, no graceful shutdown."""
        pid = self.pid()
        if pid is None:
            return
        with _gone():
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        (self.dir / "pid").unlink(missing_ok=True)

    def stop(self) -> None:
        subprocess.run(
            [*self.wrap, "rabbitmqctl", "-q", "shutdown"], env=self.env, capture_output=True
        )
        self.kill()  # in case shutdown did not get through
        shutil.rmtree(self.dir, ignore_errors=True)


class _gone:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, *_: object) -> bool:
        return kind is ProcessLookupError
