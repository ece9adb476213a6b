"""`python3 -m gpu_exporter.commands.healthcheck`: exit 0 when the local exporter answers /healthz.

For the container image's HEALTHCHECK, which has no curl. It reads the same
GPU_EXPORTER_WEB_LISTEN_ADDRESS as the exporter, and follows the exporter onto TLS when
the port answers plain HTTP with 400 (a --web.config.file with tls_server_config). The
certificate is not verified: this checks that the local process is alive, not who it is.
When the exporter requires client certificates, GPU_EXPORTER_HEALTHCHECK_CERT_FILE and
GPU_EXPORTER_HEALTHCHECK_KEY_FILE name the one to present.
"""

from __future__ import annotations

import http.client
import os
import ssl
import sys

from gpu_exporter.http.app import parse_listen_address
from gpu_exporter.model.settings import ConfigError

TIMEOUT_SECONDS = 5.0


def _target(listen_address: str) -> tuple[str, int]:
    host, port = parse_listen_address(listen_address)
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return host, port


def _get(conn: http.client.HTTPConnection) -> int:
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    finally:
        conn.close()


def check(listen_address: str, env: dict[str, str]) -> tuple[bool, str]:
    host, port = _target(listen_address)
    try:
        status = _get(http.client.HTTPConnection(host, port, timeout=TIMEOUT_SECONDS))
        if status == 200:
            return True, "ok"
        if status != 400:
            return False, f"/healthz answered {status}"
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        cert = env.get("GPU_EXPORTER_HEALTHCHECK_CERT_FILE")
        if cert:
            ctx.load_cert_chain(cert, env.get("GPU_EXPORTER_HEALTHCHECK_KEY_FILE") or None)
        status = _get(http.client.HTTPSConnection(host, port, timeout=TIMEOUT_SECONDS,
                                                   context=ctx))
    except (OSError, http.client.HTTPException) as exc:
        return False, f"{host}:{port}: {exc}"
    return status == 200, "ok" if status == 200 else f"/healthz answered {status}"


def main() -> int:
    env = dict(os.environ)
    address = sys.argv[1] if len(sys.argv) > 1 else env.get(
        "GPU_EXPORTER_WEB_LISTEN_ADDRESS", ":9445")
    try:
        ok, why = check(address, env)
    except ConfigError as exc:
        ok, why = False, str(exc)
    if not ok:
        print(f"gpu-exporter healthcheck: {why}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
