"""TLS, client certificates and basic auth against the real exporter process, with real
clients (http.client over ssl, curl)."""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

import pytest

from tests.helpers import BIN, eventually, exporter, parse, require_tool
from tests.web.certs import Certs
from tests.web.conftest import PASSWORD
from tests.web.serve import (
    basic,
    client_context,
    http_get,
    https_get,
    tls_exporter,
    write_config,
)

# What a refused TLS connection looks like to a client, depending on the TLS version and
# on when the server closes: an alert, a reset, or an early end of stream.
REFUSED = (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected, TimeoutError)


def tls_config(certs: Certs, top: dict[str, object] | None = None,
               **tls: object) -> dict[str, object]:
    server = {"cert_file": str(certs.server.cert), "key_file": str(certs.server.key), **tls}
    return {"tls_server_config": server, **(top or {})}


def test_tls_serves_metrics_and_plain_http_is_refused(certs: Certs, folder: Path) -> None:
    cfg = write_config(folder, tls_config(certs))
    ctx = client_context(certs, client_cert=None)
    with tls_exporter(cfg, ctx) as port:
        reply = https_get(port, ctx)
        assert reply.status == 200
        names = {s.name for s in parse(reply.body.decode())}
        assert "gpu_exporter_scrape_duration_seconds" in names or any(
            n.startswith("gpu_exporter_") for n in names), names
        # The client verified the server certificate against the test CA for both names.
        assert https_get(port, ctx, host="127.0.0.1").status == 200

        plain = http_get(port)
        assert plain.status == 400
        assert b"HTTP request to an HTTPS server" in plain.body
        assert b"# HELP" not in plain.body

        # A client that does not trust the CA refuses the server: TLS is really in use.
        with pytest.raises(ssl.SSLCertVerificationError):
            https_get(port, ssl.create_default_context())


def test_basic_auth_right_password_only(certs: Certs, folder: Path,
                                        password_hash: str) -> None:
    cfg = write_config(folder, tls_config(
        certs, top={"basic_auth_users": {"prometheus": password_hash}}))
    ctx = client_context(certs, client_cert=None)
    with tls_exporter(cfg, ctx) as port:
        ok = https_get(port, ctx, headers=basic("prometheus", PASSWORD))
        assert ok.status == 200 and b"gpu_exporter_" in ok.body
        # Cached success: the second scrape with the same credentials answers the same.
        assert https_get(port, ctx, headers=basic("prometheus", PASSWORD)).status == 200

        refusals = {
            "none": {},
            "wrong password": basic("prometheus", PASSWORD + "x"),
            "unknown user": basic("grafana", PASSWORD),
            "empty password": basic("prometheus", ""),
            "long password": basic("prometheus", "p" * 200),
            "not base64": {"Authorization": "Basic !!!"},
            "bearer scheme": {"Authorization": f"Bearer {PASSWORD}"},
        }
        answers = {}
        for why, headers in refusals.items():
            r = https_get(port, ctx, headers=headers)
            assert r.status == 401, why
            assert r.headers.get("WWW-Authenticate", "").startswith("Basic"), why
            answers[why] = (r.body, {k: v for k, v in r.headers.items() if k != "Date"})
            assert b"gpu_exporter_" not in r.body
        # Same body and headers whatever was wrong: nothing tells which part failed.
        assert len({repr(a) for a in answers.values()}) == 1, answers

        # Every path is protected except the liveness probe.
        assert https_get(port, ctx, "/").status == 401
        assert https_get(port, ctx, "/healthz").status == 200


def test_basic_auth_with_curl(certs: Certs, folder: Path, password_hash: str) -> None:
    curl = require_tool("curl")
    cfg = write_config(folder, tls_config(
        certs, top={"basic_auth_users": {"prometheus": password_hash}}))
    with tls_exporter(cfg, client_context(certs, client_cert=None)) as port:
        def status(*args: str) -> str:
            res = subprocess.run(
                [curl, "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert",
                 str(certs.ca.cert), *args, f"https://localhost:{port}/metrics"],
                capture_output=True, text=True, timeout=30)
            return res.stdout
        assert status("-u", f"prometheus:{PASSWORD}") == "200"
        assert status("-u", "prometheus:nope") == "401"
        assert status() == "401"


def test_client_certificate_required(certs: Certs, folder: Path) -> None:
    cfg = write_config(folder, tls_config(
        certs, client_auth_type="RequireAndVerifyClientCert",
        client_ca_file=str(certs.ca.cert)))
    good = client_context(certs, client_cert="client")
    with tls_exporter(cfg, good) as port:
        assert https_get(port, good).status == 200
        # No certificate: the handshake is refused, no HTTP answer comes back.
        with pytest.raises(REFUSED):
            https_get(port, client_context(certs, client_cert=None))
        # A certificate from a CA the exporter does not trust: refused too.
        with pytest.raises(REFUSED):
            https_get(port, client_context(certs, client_cert="rogue"))
        # With TLS 1.2 the refusal is visibly in the handshake itself.
        tls12 = client_context(certs, client_cert=None, max_version=ssl.TLSVersion.TLSv1_2)
        with socket.create_connection(("127.0.0.1", port)) as raw, \
                pytest.raises(ssl.SSLError):
            tls12.wrap_socket(raw, server_hostname="localhost")
        # Still serving after the refusals.
        assert https_get(port, good).status == 200


def test_client_certificate_if_given(certs: Certs, folder: Path) -> None:
    cfg = write_config(folder, tls_config(
        certs, client_auth_type="VerifyClientCertIfGiven",
        client_ca_file=str(certs.ca.cert)))
    anonymous = client_context(certs, client_cert=None)
    with tls_exporter(cfg, anonymous) as port:
        assert https_get(port, anonymous).status == 200
        assert https_get(port, client_context(certs, client_cert="client")).status == 200
        with pytest.raises(REFUSED):
            https_get(port, client_context(certs, client_cert="rogue"))


def test_client_allowed_sans(certs: Certs, folder: Path) -> None:
    other = certs.ca_obj.issue("other-client", "other", server=False,
                               dns=("someone.else",))
    cfg = write_config(folder, tls_config(
        certs, client_auth_type="RequireAndVerifyClientCert",
        client_ca_file=str(certs.ca.cert), client_allowed_sans=["prometheus.monitoring"]))
    good = client_context(certs, client_cert="client")
    with tls_exporter(cfg, good) as port:
        assert https_get(port, good).status == 200
        ctx = client_context(certs, client_cert=None)
        ctx.load_cert_chain(str(other.cert), str(other.key))
        with pytest.raises(REFUSED):
            https_get(port, ctx)


def test_min_version_cipher_suites_and_headers(certs: Certs, folder: Path) -> None:
    cfg13 = write_config(folder, tls_config(certs, min_version="TLS13"), "tls13.yml")
    ctx = client_context(certs, client_cert=None)
    with tls_exporter(cfg13, ctx) as port:
        with pytest.raises(ssl.SSLError):
            https_get(port, client_context(certs, client_cert=None,
                                           max_version=ssl.TLSVersion.TLSv1_2))
        with socket.create_connection(("127.0.0.1", port)) as raw, \
                ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.version() == "TLSv1.3"

    cfg12 = write_config(folder, tls_config(
        certs, max_version="TLS12",
        cipher_suites=["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"],
        top={"http_server_config": {"headers": {
            "X-Frame-Options": "deny", "Strict-Transport-Security": "max-age=31536000"}}},
    ), "tls12.yml")
    with tls_exporter(cfg12, ctx) as port:
        with socket.create_connection(("127.0.0.1", port)) as raw, \
                ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.version() == "TLSv1.2"
            assert tls.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
        reply = https_get(port, ctx)
        assert reply.status == 200
        assert reply.headers["X-Frame-Options"] == "deny"
        assert reply.headers["Strict-Transport-Security"] == "max-age=31536000"


def test_stalled_handshake_does_not_block_other_clients(certs: Certs, folder: Path) -> None:
    cfg = write_config(folder, tls_config(certs))
    ctx = client_context(certs, client_cert=None)
    with tls_exporter(cfg, ctx) as port:
        # Connections that never start their handshake hold only their own threads.
        stalled = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
        try:
            half = socket.create_connection(("127.0.0.1", port))
            half.sendall(b"\x16\x03\x01")  # the start of a ClientHello, then nothing
            stalled.append(half)
            # Well under the exporter's 10 s per-connection timeout.
            assert https_get(port, ctx, timeout=5).status == 200
        finally:
            for s in stalled:
                s.close()


def test_renewed_certificate_is_served_without_restart(certs: Certs, folder: Path) -> None:
    cert, key = folder / "live.crt", folder / "live.key"
    shutil.copy(certs.server.cert, cert)
    shutil.copy(certs.server.key, key)
    cfg = write_config(folder, {"tls_server_config": {"cert_file": "live.crt",
                                                       "key_file": "live.key"}})
    ctx = client_context(certs, client_cert=None)

    def served_serial(port: int) -> int:
        with socket.create_connection(("127.0.0.1", port)) as raw, \
                ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            der = tls.getpeercert(binary_form=True)
        from cryptography import x509
        return int(x509.load_der_x509_certificate(der).serial_number)

    with tls_exporter(cfg, ctx) as port:
        first = served_serial(port)
        renewed = certs.ca_obj.issue("renewed", "localhost", server=True,
                                     dns=("localhost",), ips=("127.0.0.1",))
        shutil.copy(renewed.key, key)
        shutil.copy(renewed.cert, cert)
        eventually(lambda: served_serial(port) != first, 10,
                   "the renewed certificate picked up", interval=0.3)
        assert https_get(port, ctx).status == 200


def _healthcheck(port: int, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "python"), "-m", "gpu_exporter.commands.healthcheck"],
        env={**os.environ, "GPU_EXPORTER_WEB_LISTEN_ADDRESS": f":{port}", **(env or {})},
        capture_output=True, text=True, timeout=30)


def test_image_healthcheck_follows_tls_and_auth(certs: Certs, folder: Path,
                                                password_hash: str) -> None:
    with exporter() as plain:
        assert _healthcheck(plain.port).returncode == 0
    cfg = write_config(folder, tls_config(
        certs, top={"basic_auth_users": {"prometheus": password_hash}}))
    with tls_exporter(cfg, client_context(certs, client_cert=None)) as port:
        res = _healthcheck(port)
        assert res.returncode == 0, res.stderr
    mtls = write_config(folder, tls_config(
        certs, client_auth_type="RequireAndVerifyClientCert",
        client_ca_file=str(certs.ca.cert)), "mtls.yml")
    with tls_exporter(mtls, client_context(certs, client_cert="client")) as port:
        refused = _healthcheck(port)
        assert refused.returncode == 1 and "healthcheck" in refused.stderr
        res = _healthcheck(port, {"GPU_EXPORTER_HEALTHCHECK_CERT_FILE": str(certs.client.cert),
                                  "GPU_EXPORTER_HEALTHCHECK_KEY_FILE": str(certs.client.key)})
        assert res.returncode == 0, res.stderr
    # Nothing listening: unhealthy.
    assert _healthcheck(port).returncode == 1
