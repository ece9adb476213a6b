"""Each way the HTTP front refuses or closes a connection early is counted by its reason
in `gpu_exporter_http_connections_refused_total` (was: a debug line only). Every case
is provoked against the real exporter process over loopback, and the counter read from
its own /metrics; the bounded reasons are the catalogue's (`HttpRefusalReason`).
"""

from __future__ import annotations

import contextlib
import resource
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

from gpu_exporter.http.server import MAX_HEAD_BYTES
from gpu_exporter.model.catalogue import HttpRefusalReason
from tests.drills.test_http_attacks import (
    NO_DEVICES,
    exporter_with,
    raw_exchange,
    statuses,
)
from tests.drills.test_http_load import get
from tests.helpers import eventually, find, parse

FAMILY = "gpu_exporter_http_connections_refused_total"
WAIT = 60  # seconds: a bound for a loaded 2-core machine, not an expectation


def refusals(port: int) -> dict[str, float]:
    status, body = get(port, timeout=30)
    assert status == 200, status
    return {s.labels["reason"]: s.value for s in find(parse(body.decode()), FAMILY)}


def rises(port: int, reason: str, above: float, wait: float = WAIT) -> None:
    def check() -> float:
        n = refusals(port)[reason]
        assert n > above, f"{reason}: {n}"
        return n

    # A scrape that fails (the server busy with the test's own connections) is retried.
    eventually(check, wait, f"{FAMILY}{{reason={reason!r}}} above {above}",
               retry_on=(AssertionError, OSError))


def closed_by_server(s: socket.socket, timeout: float = WAIT) -> bytes:
    """What the server sent before it closed the connection (b"" or a reset: nothing)."""
    s.settimeout(timeout)
    out = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := s.recv(65536):
            out += chunk
    return out


def head_of(size: int) -> bytes:
    """A complete GET head of exactly `size` bytes, its end included."""
    start = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: "
    end = b"\r\n\r\n"
    return start + b"a" * (size - len(start) - len(end)) + end


def test_every_reason_is_reported_from_the_start() -> None:
    with exporter_with([], NO_DEVICES) as exp:
        assert refusals(exp.port) == dict.fromkeys(get_args(HttpRefusalReason), 0)


def test_heads_bodies_and_requests_refused_are_counted() -> None:
    with exporter_with([], NO_DEVICES) as exp:
        before = refusals(exp.port)
        # A head past 16 KiB, still going: 431.
        big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 60_000 + b"\r\n"
        assert statuses(raw_exchange(exp.port, big)) == [b"431"]
        rises(exp.port, "head_too_large", before["head_too_large"])
        # A complete head is held to the same limit, however it arrives: one of 16 KiB is
        # answered, one a byte longer and one of 20 KB are not (h11 checks only a head
        # still incomplete, and read two 16 KiB chunks at once: 20 KB heads were answered).
        assert statuses(raw_exchange(exp.port, head_of(MAX_HEAD_BYTES))) == [b"200"]
        for size in (MAX_HEAD_BYTES + 1, 20_000):
            assert statuses(raw_exchange(exp.port, head_of(size))) == [b"431"], size
        # No Host on HTTP/1.1, a line that is no request, both framings, HTTP/2: 400/505.
        for bad, status in ((b"GET /healthz HTTP/1.1\r\n\r\n", b"400"),
                            (b"\x16\x03\x01 not a request\r\n\r\n", b"400"),
                            (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\nab", b"400"),
                            (b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", b"505")):
            assert statuses(raw_exchange(exp.port, bad)) == [status], bad
        rises(exp.port, "malformed_request", before["malformed_request"] + 3)
        # A GET body past 64 KiB: 413.
        body = b"x" * (1 << 20)
        got = raw_exchange(exp.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        assert statuses(got) == [b"413"]
        rises(exp.port, "body_too_large", before["body_too_large"])
        # Answered requests are not refusals; each refusal is counted once, by its reason.
        for _ in range(3):
            assert get(exp.port, "/healthz")[0] == 200
        want = {**before, "head_too_large": before["head_too_large"] + 3,
                "malformed_request": before["malformed_request"] + 4,
                "body_too_large": before["body_too_large"] + 1}
        assert refusals(exp.port) == want


def test_a_head_not_sent_in_time_is_counted_and_an_idle_keep_alive_is_not() -> None:
    with exporter_with(["--web.read-header-timeout=2"], NO_DEVICES) as exp:
        before = refusals(exp.port)["head_timeout"]
        # A kept-alive connection, one request answered, then nothing: closed at the
        # timeout as any idle connection, and not counted.
        with socket.create_connection(("127.0.0.1", exp.port), timeout=WAIT) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = closed_by_server(s)
        assert statuses(answer) == [b"200"], answer
        assert refusals(exp.port)["head_timeout"] == before
        # A head that trickles in part and stops: cut at the timeout, counted.
        with socket.create_connection(("127.0.0.1", exp.port), timeout=WAIT) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            assert closed_by_server(s) == b""
        rises(exp.port, "head_timeout", before)
        # A connection that sends nothing at all: counted as well.
        n = refusals(exp.port)["head_timeout"]
        with socket.create_connection(("127.0.0.1", exp.port), timeout=WAIT) as s:
            assert closed_by_server(s) == b""
        rises(exp.port, "head_timeout", n)


def test_a_body_not_sent_in_time_is_a_slow_client() -> None:
    with exporter_with([], NO_DEVICES) as exp:
        before = refusals(exp.port)["slow_client"]
        with socket.create_connection(("127.0.0.1", exp.port), timeout=WAIT) as s:
            # One byte of the 100 announced, then nothing: closed after 10 s.
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nx")
            assert closed_by_server(s) == b""
        rises(exp.port, "slow_client", before)


@contextlib.contextmanager
def file_limit(want: int) -> Iterator[None]:
    """This process's (and so the exporter's) file descriptor limit raised to `want`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= want, f"RLIMIT_NOFILE hard limit {hard} is below {want}"
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_connections_past_the_limit_evict_idle_ones() -> None:
    """Idle connections past the cap: the oldest idle ones make room. (Every place busy,
    and a new connection answered 503: tests/core/test_front_pressure.py, in process,
    where a handler can hold every place for certain.)"""
    cap = 512  # server.MAX_CONNECTIONS
    held: list[socket.socket] = []

    def connect() -> None:
        with contextlib.suppress(OSError):
            held.append(socket.create_connection(("127.0.0.1", exp.port), timeout=10))

    with file_limit(4 * cap + 200), exporter_with([], NO_DEVICES) as exp:
        try:
            for _ in range(cap + 20):
                connect()
            assert len(held) >= cap + 10, len(held)
            rises(exp.port, "evicted", 0)
            assert refusals(exp.port)["connection_limit"] == 0
        finally:
            for s in held:
                s.close()


def test_idle_connections_closed_at_the_file_descriptor_limit_are_counted() -> None:
    nofile = 128
    held: list[socket.socket] = []
    with exporter_with(["--web.read-header-timeout=60"], NO_DEVICES, nofile=nofile) as exp:
        try:
            for _ in range(nofile + 20):  # more than the exporter can accept
                with contextlib.suppress(OSError):
                    held.append(socket.create_connection(("127.0.0.1", exp.port), timeout=5))
            # The scrape waits its turn behind them: one idle connection is closed for
            # it each time accept() fails (every 0.25 s).
            rises(exp.port, "file_descriptor_limit", 0, 2 * WAIT)
        finally:
            for s in held:
                s.close()


def test_tls_refusals_are_counted(tmp_path: Path) -> None:
    from tests.web.certs import make_certs
    from tests.web.serve import https_get, tls_exporter, write_config

    certs = make_certs(tmp_path)
    cfg = write_config(tmp_path, {
        "tls_server_config": {"cert_file": str(certs.server.cert),
                              "key_file": str(certs.server.key)}})
    ctx = ssl.create_default_context(cafile=str(certs.ca.cert))

    def counted(port: int) -> dict[str, float]:
        reply = https_get(port, ctx, timeout=30)
        assert reply.status == 200, reply.status
        return {s.labels["reason"]: s.value
                for s in find(parse(reply.body.decode()), FAMILY)}

    def rises_tls(port: int, reason: str, above: float) -> None:
        def check() -> float:
            n = counted(port)[reason]
            assert n > above, f"{reason}: {n}"
            return n

        eventually(check, WAIT, f"{FAMILY}{{reason={reason!r}}} above {above}",
                   retry_on=(AssertionError, OSError))

    with tls_exporter(cfg, ctx, args=["--web.read-header-timeout=3"],
                      env=NO_DEVICES) as port:
        before = counted(port)
        # Plain HTTP to the TLS port: Go's 400, counted.
        got = raw_exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert statuses(got) == [b"400"], got
        rises_tls(port, "tls_handshake", before["tls_handshake"])
        # A client that does not trust the server's CA: it ends the handshake with an
        # alert, counted.
        n = counted(port)["tls_handshake"]
        stranger = ssl.create_default_context()
        with contextlib.suppress(ssl.SSLError, OSError), \
                socket.create_connection(("127.0.0.1", port), timeout=WAIT) as raw, \
                stranger.wrap_socket(raw, server_hostname="localhost"):
            raise AssertionError("the handshake succeeded without the CA")
        rises_tls(port, "tls_handshake", n)
        # A handshake begun and never finished: cut at the head timeout, counted as one.
        now = counted(port)
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as s:
            s.sendall(b"\x16\x03\x01\x00")  # the start of a ClientHello record
            assert closed_by_server(s) == b""
        rises_tls(port, "head_timeout", now["head_timeout"])
        assert counted(port)["tls_handshake"] == now["tls_handshake"]
