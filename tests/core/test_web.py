"""HTTP behaviour of the real server process."""

from __future__ import annotations

import gzip
import http.client
import socket
import time
import tomllib
from importlib.metadata import version

from packaging.requirements import Requirement

from tests.helpers import REPO, eventually, exporter

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

        # The fastest level (RFC 1952's XFL byte 4), not gzip's default 9 (XFL 2): the
        # answer Prometheus asks for every scrape.
        assert body[8] == 4, body[:10]

        status, headers, body = _request(exp.port, "HEAD", "/metrics")
        assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0

        status, _, body = _request(exp.port, "GET", "/")
        assert status == 200 and b'href="/metrics"' in body

        assert _request(exp.port, "GET", "/healthz")[0] == 200
        assert _request(exp.port, "GET", "/nope")[0] == 404
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            status, headers, _ = _request(exp.port, method, "/metrics")
            assert status == 405 and headers["Allow"] == "GET, HEAD", method


def _raw(port: int, data: bytes) -> bytes:
    """Send bytes as they are (http.client would not send a garbled request) and read
    until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def _head_and_body(response: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    return status, dict(line.split(": ", 1) for line in lines), body


def test_every_other_method_gets_405_with_allow_in_plain_text() -> None:
    with exporter(env=NO_DEVICES) as exp:
        for line in ("POST /metrics", "PUT /", "DELETE /healthz", "PATCH /metrics",
                     "OPTIONS *", "TRACE /metrics", "CONNECT example.com:443",
                     "PROPFIND /metrics", "FROBNICATE /nope"):
            status, headers, body = _head_and_body(_raw(
                exp.port, f"{line} HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
                .encode()))
            assert status == "HTTP/1.1 405 Method Not Allowed", (line, status)
            assert headers["Allow"] == "GET, HEAD", line
            assert headers["Content-Type"] == "text/plain; charset=utf-8", line
            assert body == b"405 method not allowed\n", line
        assert _request(exp.port, "GET", "/metrics")[0] == 200


def test_garbled_request_line_gets_400_in_plain_text() -> None:
    with exporter(env=NO_DEVICES) as exp:
        for line in (b"GARBAGE", b"GET /metrics", b"GET /metrics HTTP/1.1 extra",
                     b"GET  /metrics HTTP/1.1", b"G@T /metrics HTTP/1.1",
                     b"GET metrics HTTP/1.1", b"GET /metrics HTTP/x.y",
                     b"GET /m\x00trics HTTP/1.1", b"\x16\x03\x01\x00\xa5\x01\x00"):
            status, headers, body = _head_and_body(_raw(exp.port, line + b"\r\n\r\n"))
            assert status == "HTTP/1.1 400 Bad Request", (line, status)
            assert headers["Content-Type"] == "text/plain; charset=utf-8", line
            assert body.startswith(b"400 ") and b"<" not in body, (line, body)
        # A proxy's absolute form names the same resources.
        status, _, body = _head_and_body(_raw(
            exp.port, b"GET http://x/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
        assert status == "HTTP/1.1 200 OK" and body == b"ok\n"


def test_negotiation_and_name_filter_are_prometheus_clients() -> None:
    with exporter(env=NO_DEVICES) as exp:
        # gzip only when the client lists it as a coding, not when the word appears.
        status, headers, body = _request(exp.port, "GET", "/metrics",
                                         {"Accept-Encoding": "br, x-nogzip"})
        assert status == 200 and "Content-Encoding" not in headers
        assert b"gpu_exporter_build_info" in body
        status, headers, body = _request(exp.port, "GET", "/metrics",
                                         {"Accept-Encoding": "br;q=1.0, GZIP;q=0.5"})
        assert headers["Content-Encoding"] == "gzip"
        assert int(headers["Content-Length"]) == len(body)
        assert b"gpu_exporter_build_info" in gzip.decompress(body)

        # name[] keeps only the named series (as Prometheus' federation asks for them).
        status, _, body = _request(
            exp.port, "GET",
            "/metrics?name[]=gpu_exporter_build_info&name[]=gpu_exporter_collector_success")
        names = {line.split("{")[0] for line in body.decode().splitlines()
                 if line and not line.startswith("#")}
        assert status == 200
        assert names == {"gpu_exporter_build_info", "gpu_exporter_collector_success"}

        # OpenMetrics with a gzip body, and the filter, at once.
        status, headers, body = _request(
            exp.port, "GET", "/metrics?name[]=gpu_exporter_build_info",
            {"Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8",
             "Accept-Encoding": "gzip"})
        text = gzip.decompress(body).decode()
        assert headers["Content-Type"].startswith("application/openmetrics-text")
        assert text.endswith("# EOF\n") and "gpu_exporter_collector_success" not in text


def test_a_refused_coding_and_an_unknown_version_are_not_served() -> None:
    with exporter(env=NO_DEVICES) as exp:
        # q=0 means "not acceptable" (RFC 9110 section 12.5.3).
        for refused in ("gzip;q=0", "gzip; q=0.000, br", "GZIP;Q=0"):
            status, headers, body = _request(exp.port, "GET", "/metrics",
                                             {"Accept-Encoding": refused})
            assert status == 200 and "Content-Encoding" not in headers, refused
            assert b"gpu_exporter_build_info" in body
        status, headers, _ = _request(exp.port, "GET", "/metrics",
                                      {"Accept-Encoding": "gzip;q=0.1"})
        assert headers["Content-Encoding"] == "gzip"
        # An OpenMetrics version the library does not write is passed over, as
        # Prometheus' Go client does, never echoed into the Content-Type.
        status, headers, body = _request(
            exp.port, "GET", "/metrics",
            {"Accept": "application/openmetrics-text; version=9.9.9"})
        assert status == 200 and "9.9.9" not in headers["Content-Type"]
        assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert not body.rstrip().endswith(b"# EOF")
        status, headers, body = _request(
            exp.port, "GET", "/metrics",
            {"Accept": "application/openmetrics-text; version=9.9.9, "
                       "application/openmetrics-text; version=1.0.0; q=0.5"})
        assert "version=1.0.0" in headers["Content-Type"], headers
        assert body.rstrip().endswith(b"# EOF")


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
        eventually(lambda: _threads(exp.proc.pid) <= before + 1, 10,
                   f"at most {before + 1} threads once the clients are cut off")


def test_prometheus_client_is_the_tested_release_range() -> None:
    # Everything /metrics does is prometheus_client's (its WSGI application: encoders,
    # gzip, name[]); a release outside the tested range is not run unnoticed.
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = next(Requirement(d) for d in deps if d.startswith("prometheus-client")).specifier
    assert any(s.operator == "<" for s in spec), f"no upper bound: {spec}"
    assert spec.contains(version("prometheus-client")), (version("prometheus-client"), spec)
