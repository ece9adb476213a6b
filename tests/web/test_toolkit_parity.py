"""Parity with the reference: the same web config files, served by node_exporter (the Go
exporter-toolkit, Debian's prometheus-node-exporter) and by gpu-exporter, answer the same
clients the same way: status codes, refused handshakes, the 400 for plain HTTP, and
start-up refusal of the same broken files."""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers import EXPORTER, free_port, require_tool, stop_process, wait_started
from tests.web.certs import Certs
from tests.web.conftest import PASSWORD
from tests.web.serve import basic, client_context, https_get, write_config

REFUSED = (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected, TimeoutError)
Outcome = int | str


@contextmanager
def serving(which: str, config: Path) -> Iterator[int]:
    port = free_port()
    if which == "node_exporter":
        cmd = [require_tool("prometheus-node-exporter"), "--collector.disable-defaults",
               f"--web.listen-address=127.0.0.1:{port}", f"--web.config.file={config}"]
    else:
        cmd = [EXPORTER, f"--web.listen-address=127.0.0.1:{port}",
               f"--web.config.file={config}"]
    log = config.parent / f"{which}-{port}.log"
    with open(log, "wb") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=os.environ)
    try:
        wait_started(proc, lambda: _accepts(port), log.read_text, which, 30)
        yield port
    finally:
        stop_process(proc)


def _accepts(port: int) -> bool:
    # A bare TCP connect: one probe fits both servers and every config under test.
    socket.create_connection(("127.0.0.1", port), timeout=1).close()
    return True


def outcome(fn: Callable[[], Outcome]) -> Outcome:
    try:
        return fn()
    except REFUSED:
        return "refused"


def plain_http(port: int) -> Outcome:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        return conn.getresponse().status
    finally:
        conn.close()


def both(config: Path, clients: dict[str, Callable[[int], Outcome]]
         ) -> dict[str, dict[str, Outcome]]:
    got: dict[str, dict[str, Outcome]] = {}
    for which in ("node_exporter", "gpu-exporter"):
        with serving(which, config) as port:
            got[which] = {name: outcome(lambda c=c: c(port))  # type: ignore[misc]
                          for name, c in clients.items()}
    return got


def tls(certs: Certs, **extra: object) -> dict[str, object]:
    return {"cert_file": str(certs.server.cert), "key_file": str(certs.server.key), **extra}


def test_basic_auth_and_plain_http_match_node_exporter(certs: Certs, folder: Path,
                                                      password_hash: str) -> None:
    cfg = write_config(folder, {"tls_server_config": tls(certs),
                                "basic_auth_users": {"prometheus": password_hash}})
    anon = client_context(certs, client_cert=None)
    tls12 = client_context(certs, client_cert=None, max_version=ssl.TLSVersion.TLSv1_2)

    def status(headers: dict[str, str], ctx: ssl.SSLContext = anon) -> Callable[[int], int]:
        return lambda port: https_get(port, ctx, headers=headers).status

    got = both(cfg, {
        "right password": status(basic("prometheus", PASSWORD)),
        "right password, TLS 1.2": status(basic("prometheus", PASSWORD), tls12),
        "wrong password": status(basic("prometheus", "nope")),
        "unknown user": status(basic("grafana", PASSWORD)),
        "no credentials": status({}),
        "plain HTTP to the TLS port": plain_http,
    })
    assert got["gpu-exporter"] == got["node_exporter"], got
    assert got["gpu-exporter"]["right password"] == 200
    assert got["gpu-exporter"]["no credentials"] == 401
    assert got["gpu-exporter"]["plain HTTP to the TLS port"] == 400


def test_client_certificates_match_node_exporter(certs: Certs, folder: Path) -> None:
    clients = {
        "client certificate": lambda port: https_get(
            port, client_context(certs, "client")).status,
        "no certificate": lambda port: https_get(
            port, client_context(certs, None)).status,
        "certificate of another CA": lambda port: https_get(
            port, client_context(certs, "rogue")).status,
    }
    for policy in ("RequireAndVerifyClientCert", "VerifyClientCertIfGiven"):
        cfg = write_config(folder, {"tls_server_config": tls(
            certs, client_auth_type=policy, client_ca_file=str(certs.ca.cert))},
            f"{policy}.yml")
        got = both(cfg, clients)
        assert got["gpu-exporter"] == got["node_exporter"], (policy, got)
        assert got["gpu-exporter"]["client certificate"] == 200
        assert got["gpu-exporter"]["certificate of another CA"] == "refused"


def test_min_version_matches_node_exporter(certs: Certs, folder: Path) -> None:
    cfg = write_config(folder, {"tls_server_config": tls(certs, min_version="TLS13")})
    got = both(cfg, {
        "TLS 1.2 client": lambda port: https_get(port, client_context(
            certs, None, max_version=ssl.TLSVersion.TLSv1_2)).status,
        "TLS 1.3 client": lambda port: https_get(port, client_context(certs, None)).status,
    })
    assert got["gpu-exporter"] == got["node_exporter"] == {
        "TLS 1.2 client": "refused", "TLS 1.3 client": 200}, got


def test_broken_files_are_refused_by_both(certs: Certs, folder: Path) -> None:
    node = require_tool("prometheus-node-exporter")
    broken = {
        "unknown key": {"tls_server_config": tls(certs, certfile="x")},
        "missing key file": {"tls_server_config": {"cert_file": str(certs.server.cert)}},
        "CA without a policy": {"tls_server_config": tls(
            certs, client_ca_file=str(certs.ca.cert))},
        "unknown policy": {"tls_server_config": tls(certs, client_auth_type="Sometimes")},
        "missing certificate": {"tls_server_config": tls(certs, cert_file="/nonexistent.crt")},
    }
    for name, content in broken.items():
        cfg = write_config(folder, content, "broken.yml")
        port = free_port()
        ours = subprocess.run([EXPORTER, f"--web.listen-address=127.0.0.1:{port}",
                               f"--web.config.file={cfg}"],
                              capture_output=True, text=True, timeout=30)
        assert ours.returncode == 2, (name, ours.stderr)
        # node_exporter checks the file at start-up too, and exits.
        theirs = subprocess.run([node, "--collector.disable-defaults",
                                 f"--web.listen-address=127.0.0.1:{port}",
                                 f"--web.config.file={cfg}"],
                                capture_output=True, text=True, timeout=30)
        assert theirs.returncode != 0, (name, theirs.stderr)
