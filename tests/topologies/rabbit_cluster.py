"""A private three-node RabbitMQ cluster on this machine: nodes ``topo1@localhost`` ..., AMQP on
127.0.0.1:5681-5683, distribution on 25681-25683 (never the shared node's 5672 nor the restart
tests' 5673), data in a folder of their own under /tmp. The nodes find each other at boot
(``classic_config`` peer discovery) and share the machine's Erlang cookie (the rabbitmq user's,
as the node of tests/rabbitmq/node.py does). ``kill`` is a SIGKILL of one node's VM.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.topologies.servers import missing, need_binary, need_root

NAMES = ("topo1", "topo2", "topo3")
AMQP = {name: 5681 + n for n, name in enumerate(NAMES)}


class RabbitCluster:
    def __init__(self) -> None:
        need_binary("rabbitmq-server", "apt-get install rabbitmq-server")
        need_root("a private RabbitMQ cluster")
        self.dir = Path(tempfile.mkdtemp(prefix="topo-rmq-"))
        shutil.chown(self.dir, "rabbitmq", "rabbitmq")
        self.alive: set[str] = set()

    def url(self, options: str) -> str:
        hosts = ",".join(f"127.0.0.1:{AMQP[n]}" for n in NAMES)
        return f"amqp://guest:guest@{hosts}/?{options}"

    def _env(self, name: str) -> dict[str, str]:
        folder = self.dir / name
        return {
            **os.environ,
            "RABBITMQ_NODENAME": f"{name}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(AMQP[name]),
            "RABBITMQ_DIST_PORT": str(AMQP[name] + 20000),
            "RABBITMQ_MNESIA_BASE": str(folder / "mnesia"),
            "RABBITMQ_LOG_BASE": str(folder / "log"),
            "RABBITMQ_PID_FILE": str(folder / "pid"),
            "RABBITMQ_CONFIG_FILE": str(folder / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(folder / "enabled_plugins"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    def start(self, within: float = 120.0) -> None:
        for name in NAMES:
            folder = self.dir / name
            folder.mkdir()
            peers = "".join(
                f"cluster_formation.classic_config.nodes.{n + 1} = {peer}@localhost\n"
                for n, peer in enumerate(NAMES)
            )
            (folder / "rabbitmq.conf").write_text(
                f"listeners.tcp.local = 127.0.0.1:{AMQP[name]}\nloopback_users = none\n"
                "cluster_formation.peer_discovery_backend = classic_config\n" + peers
            )
            (folder / "enabled_plugins").write_text("[].\n")
            for path in [folder, *folder.iterdir()]:
                shutil.chown(path, "rabbitmq", "rabbitmq")
        for name in NAMES:  # all at once: each waits for its peers at boot
            subprocess.run(
                ["rabbitmq-server", "-detached"],
                env=self._env(name),
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            self.alive.add(name)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            done = subprocess.run(
                ["rabbitmqctl", "-q", "await_online_nodes", "3", "--timeout", "30"],
                env=self._env(NAMES[0]),
                capture_output=True,
            )
            if done.returncode == 0:
                return
            time.sleep(0.5)  # not reachable yet right after -detached
        missing(f"the RabbitMQ cluster did not form within {within}s (logs in {self.dir})")

    def _pid(self, name: str) -> int | None:
        try:
            return int((self.dir / name / "pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def kill(self, name: str) -> None:
        """Crash one node: SIGKILL of its VM."""
        pid = self._pid(name)
        self.alive.discard(name)
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)  # the VM exits

    def stop(self) -> None:
        for name in NAMES:
            self.kill(name)
        shutil.rmtree(self.dir, ignore_errors=True)
