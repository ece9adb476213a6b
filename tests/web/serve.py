"""Start the real exporter with a web config and talk to it with real TLS clients."""

from __future__ import annotations

import base64
import http.client
import os
import ssl
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.helpers import EXPORTER, free_port, stop_process, wait_started
from tests.web.certs import Certs


def write_config(folder: Path, config: Mapping[str, object], name: str = "web.yml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(dict(config)))
    return path


def client_context(certs: Certs, client_cert: str | None = "client",
                   max_version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs.ca.cert))
    if client_cert == "client":
        ctx.load_cert_chain(str(certs.client.cert), str(certs.client.key))
    elif client_cert == "rogue":
        ctx.load_cert_chain(str(certs.rogue_client.cert), str(certs.rogue_client.key))
    if max_version is not None:
        ctx.maximum_version = max_version
    return ctx


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


def https_get(port: int, ctx: ssl.SSLContext, path: str = "/metrics",
              headers: Mapping[str, str] | None = None, host: str = "localhost",
              timeout: float = 10) -> Reply:
    conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=timeout)
    try:
        conn.request("GET", path, headers=dict(headers or {}))
        r = conn.getresponse()
        return Reply(r.status, {k: v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


def http_get(port: int, path: str = "/metrics", timeout: float = 10) -> Reply:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return Reply(r.status, {k: v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


@contextmanager
def tls_exporter(config: Path, ready_ctx: ssl.SSLContext, args: Sequence[str] = (),
                 user: str | None = None, env: Mapping[str, str] | None = None,
                 start_timeout: float = 30, pid: list[int] | None = None) -> Iterator[int]:
    """The real exporter serving with `--web.config.file`; yields its port once /healthz
    answers over TLS with `ready_ctx`. `user`: run as that user, without supplementary
    groups (setpriv execs the exporter: same process). `pid` receives its process id."""
    port = free_port()
    cmd = [EXPORTER, f"--web.listen-address=127.0.0.1:{port}", f"--web.config.file={config}",
           *args]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--", *cmd]
    log = config.parent / f"exporter-{port}.log"
    with open(log, "wb") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})})
    if pid is not None:
        pid.append(proc.pid)
    try:
        wait_started(proc, lambda: https_get(port, ready_ctx, "/healthz", timeout=2).status == 200,
                     log.read_text, "exporter", start_timeout)
        yield port
    finally:
        stop_process(proc)
