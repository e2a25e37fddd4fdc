"""A private certificate authority and a server certificate for 127.0.0.1, made with the
``openssl`` command (Debian's), for the tests that run servers over TLS."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.topologies.servers import need_binary


@dataclass(frozen=True)
class Certificates:
    ca: Path
    """The authority's certificate: what a client trusts (``ssl_ca_certs``)."""
    cert: Path
    key: Path
    """The server's certificate (for IP 127.0.0.1 and localhost) and its key."""


def make_certificates(folder: Path) -> Certificates:
    openssl = need_binary("openssl", "apt-get install openssl")
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / "ca.crt", folder / "ca.key"
    cert, key, request = folder / "server.crt", folder / "server.key", folder / "server.csr"
    extensions = folder / "server.ext"
    extensions.write_text("subjectAltName = IP:127.0.0.1, DNS:localhost\n")

    def run(*argv: str | Path) -> None:
        subprocess.run([openssl, *map(str, argv)], check=True, capture_output=True)

    new_key = ("-newkey", "rsa:2048", "-nodes")
    run("req", "-x509", *new_key, "-days", "2", "-subj", "/CN=relaymq test CA", "-keyout", ca_key,
        "-out", ca)  # fmt: skip
    run("req", *new_key, "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", request)
    run("x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
        "-days", "2", "-extfile", extensions, "-out", cert)  # fmt: skip
    return Certificates(ca, cert, key)
