"""HTTP behaviour of the real server process."""

from __future__ import annotations

import gzip
import http.client
import socket
import time

from tests.helpers import exporter

NO_DEVICES = {"LD_LIBRARY_PATH": "/nonexistent", "GPU_EXPORTER_PATH_SYSFS": "/nonexistent"}


def _request(port: int, method: str, path: str,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def test_endpoints_methods_and_encodings() -> None:
    with exporter(env=NO_DEVICES) as exp:
        status, headers, body = _request(exp.port, "GET", "/metrics")
        assert status == 200
        assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert b"gpu_exporter_build_info" in body

        status, headers, body = _request(
            exp.port, "GET", "/metrics",
            {"Accept": "application/openmetrics-text; version=1.0.0"})
        assert status == 200
        assert headers["Content-Type"].startswith("application/openmetrics-text")
        assert body.rstrip().endswith(b"# EOF")

        status, headers, body = _request(exp.port, "GET", "/metrics",
                                         {"Accept-Encoding": "gzip"})
        assert status == 200 and headers["Content-Encoding"] == "gzip"
        assert b"gpu_exporter_build_info" in gzip.decompress(body)

        status, headers, body = _request(exp.port, "HEAD", "/metrics")
        assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0

        status, _, body = _request(exp.port, "GET", "/")
        assert status == 200 and b'href="/metrics"' in body

        assert _request(exp.port, "GET", "/healthz")[0] == 200
        assert _request(exp.port, "GET", "/nope")[0] == 404
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            status, headers, _ = _request(exp.port, method, "/metrics")
            assert status == 405 and headers["Allow"] == "GET, HEAD", method


def test_oversized_headers_are_refused_and_server_keeps_serving() -> None:
    with exporter(env=NO_DEVICES) as exp:
        big = {f"X-Pad-{i}": "a" * 1000 for i in range(40)}
        assert _request(exp.port, "GET", "/metrics", big)[0] == 431
        assert _request(exp.port, "GET", "/metrics")[0] == 200


def test_silent_client_does_not_block_scrapes() -> None:
    with exporter(env=NO_DEVICES) as exp:
        idle = [socket.create_connection(("127.0.0.1", exp.port)) for _ in range(20)]
        try:
            for s in idle:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finishes
            assert _request(exp.port, "GET", "/metrics")[0] == 200
        finally:
            for s in idle:
                s.close()


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


def test_trickling_client_is_cut_off_at_the_header_deadline() -> None:
    with exporter(["--web.read-header-timeout=1"], env=NO_DEVICES) as exp:
        before = _threads(exp.proc.pid)
        clients = [socket.create_connection(("127.0.0.1", exp.port)) for _ in range(10)]
        started = time.monotonic()
        for c in clients:
            c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        closed_after = []
        for _ in range(40):  # one header byte every 0.2 s: each read is quick, the head never ends
            time.sleep(0.2)
            for c in list(clients):
                try:
                    c.sendall(b"X")
                except OSError:
                    clients.remove(c)
                    closed_after.append(time.monotonic() - started)
            if not clients:
                break
        assert not clients, "a client trickling header bytes was never disconnected"
        assert all(t < 4 for t in closed_after), closed_after
        assert _request(exp.port, "GET", "/metrics")[0] == 200
        time.sleep(0.5)
        assert _threads(exp.proc.pid) <= before + 1
