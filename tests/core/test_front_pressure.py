"""The HTTP front under pressure, in process (issue 32, items 1 and 2): a handler that
holds its requests makes "every place busy" certain, and counts what it was asked.
(The same attacks against the real exporter, with scrapes alongside: tests/drills/.)"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import bcrypt

from gpu_exporter.http.server import MAX_PIPELINED, HttpServer, Limits, Request, Response
from tests.helpers import eventually


@dataclass
class Front:
    server: HttpServer
    port: int
    asked: list[str] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def refusals(self, reason: str) -> int:
        return self.server.refusal_counts()[reason]  # type: ignore[index]


@contextlib.contextmanager
def front(max_connections: int = 512, hold: bool = False, admit_status: int | None = None,
          ) -> Iterator[Front]:
    box: list[Front] = []

    async def handler(request: Request) -> Response:
        f = box[0]
        f.asked.append(request.target)
        while hold and not f.release.is_set():
            await asyncio.sleep(0.01)
        return Response(200, b"ok\n", [("Content-Type", "text/plain")])

    async def admit(request: Request) -> Response | None:
        if admit_status is None:
            return None
        return Response(admit_status, b"no\n", [("Content-Type", "text/plain")], close=True)

    server = HttpServer(("127.0.0.1", 0), handler,
                       Limits(read_header_timeout=5, max_connections=max_connections),
                       admit=admit)
    box.append(Front(server, server.server_address[1]))
    loop = threading.Thread(target=server.serve_forever)
    loop.start()
    try:
        yield box[0]
    finally:
        box[0].release.set()
        server.shutdown()
        server.server_close()
        loop.join(10)


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def read_all(s: socket.socket) -> bytes:
    out = b""
    with contextlib.suppress(OSError):
        while chunk := s.recv(65536):
            out += chunk
    return out


def statuses(data: bytes) -> list[bytes]:
    return re.findall(rb"^HTTP/1\.1 (\d{3})", data, re.M)


GET = b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n"


def test_past_the_cap_with_every_place_busy_a_503_and_a_close() -> None:
    """Was: a reset. Now the client reads why, and when to come back."""
    with front(max_connections=4, hold=True) as f:
        held = [connect(f.port) for _ in range(4)]
        for s in held:
            s.sendall(GET)
        eventually(lambda: len(f.asked) == 4, 10, "four requests held by the handler")
        extra = connect(f.port)
        extra.sendall(GET)
        got = read_all(extra)
        assert statuses(got) == [b"503"], got
        assert b"Retry-After: 1" in got and b"Connection: close" in got
        assert f.refusals("connection_limit") == 1
        f.release.set()
        for s in held:
            assert statuses(s.recv(4096)) == [b"200"]
            s.close()
        extra.close()


def test_a_connection_sending_its_body_slowly_is_evicted_for_a_new_one() -> None:
    """Was: busy for 10 s, never evicted, so 600 slow bodies held every place."""
    with front(max_connections=4) as f:
        slow = [connect(f.port) for _ in range(4)]
        for s in slow:
            s.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\na")
        eventually(lambda: len(f.server._table.conns) == 4, 10, "four bodies arriving")
        fresh = connect(f.port)
        fresh.sendall(GET.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
        assert statuses(read_all(fresh)) == [b"200"]
        assert f.refusals("evicted") == 1
        assert f.asked == ["/x"]  # the slow ones never reached the handler
        for s in slow:
            s.close()


def test_a_body_is_not_read_before_admission_refuses_it() -> None:
    with front(admit_status=401) as f:
        s = connect(f.port)
        # The body never comes: the 401 does not wait for it.
        s.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\n")
        started = time.monotonic()
        got = read_all(s)
        assert statuses(got) == [b"401"] and b"Connection: close" in got, got
        assert time.monotonic() - started < 3  # the linger, not the 5 s body deadline
        assert f.asked == []
        s.close()


def test_a_malformed_chunked_body_is_a_400_and_counted() -> None:
    """Was: a silent close, neither answered nor counted."""
    with front() as f:
        s = connect(f.port)
        s.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"zz\r\nhello\r\n0\r\n\r\n")
        got = read_all(s)
        assert statuses(got) == [b"400"], got
        assert f.refusals("malformed_request") == 1
        assert f.asked == []
        s.close()


def test_pipelined_requests_are_bounded_and_the_excess_refused() -> None:
    with front() as f:
        s = connect(f.port)
        s.sendall(GET * 50)
        got = read_all(s)
        # The first, then MAX_PIPELINED more; the next is refused and the connection ends.
        assert statuses(got) == [b"200"] * (MAX_PIPELINED + 1) + [b"503"], statuses(got)
        assert len(f.asked) == MAX_PIPELINED + 1
        assert f.refusals("pipeline_limit") == 1
        s.close()


def test_pipelined_requests_of_a_client_gone_are_not_answered() -> None:
    """Issue 32: 1,000 pipelined requests and a close were all rendered, into a closed
    connection (writes to it raise nothing). Now the handler sees the first at most."""
    with front(hold=True) as f:
        conns = []
        for _ in range(20):
            s = connect(f.port)
            s.sendall(GET * 200)
            conns.append(s)
        eventually(lambda: len(f.asked) >= 20, 10, "every first request in the handler")
        for s in conns:
            s.close()
        f.release.set()
        eventually(lambda: len(f.server._table.conns) == 0, 10, "every connection ended")
        assert len(f.asked) <= 2 * 20, len(f.asked)
        assert f.refusals("client_gone") >= 20 - 2


def test_a_401_closes_the_connection_and_429_past_the_budget() -> None:
    """With basic auth: a wrong password is answered and the connection closed (was: kept,
    so one connection's pipelined wrong requests were answered one 401 at a time); an
    address past its budget of failures gets 429 without a bcrypt."""
    from prometheus_client import CollectorRegistry

    from gpu_exporter.http.app import App
    from gpu_exporter.http.webconfig import BasicAuth

    auth = BasicAuth({"u": bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=4))})
    app = App(CollectorRegistry(), auth=auth)
    server = HttpServer(("127.0.0.1", 0), app, Limits(), admit=app.admit)
    loop = threading.Thread(target=server.serve_forever)
    loop.start()
    try:
        wrong = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic dTp3cm9uZw==\r\n\r\n"
        seen = []
        for _ in range(12):
            with connect(server.server_address[1]) as s:
                s.sendall(wrong * 3)
                got = read_all(s)
            seen.extend(statuses(got))
            assert len(statuses(got)) == 1, got  # one answer, then the close
        assert seen[:10] == [b"401"] * 10 and seen[10:] == [b"429", b"429"], seen
    finally:
        server.shutdown()
        server.server_close()
        loop.join(10)


def test_scrapes_asking_while_a_page_renders_share_the_next_rendering() -> None:
    """SharedRenders: 50 scrapes that come while a page renders cost one rendering more,
    not 50, and none gets a rendering that began before it asked."""
    from concurrent.futures import ThreadPoolExecutor

    from gpu_exporter.http.app import SharedRenders

    began: list[int] = []
    gate = threading.Event()

    def make() -> bytes:
        began.append(len(began) + 1)
        n = began[-1]
        gate.wait(10)
        return str(n).encode()

    async def scenario() -> tuple[bytes, list[bytes]]:
        shared = SharedRenders(ThreadPoolExecutor(max_workers=4))
        first = asyncio.ensure_future(shared.get("page", make))
        while not began:  # the first rendering under way
            await asyncio.sleep(0.001)
        later = [asyncio.ensure_future(shared.get("page", make)) for _ in range(50)]
        await asyncio.sleep(0.05)
        assert began == [1]  # the later ones wait for the next, which has not begun
        gate.set()
        return await first, list(await asyncio.gather(*later))

    first, later = asyncio.run(scenario())
    assert first == b"1" and set(later) == {b"2"}
    assert began == [1, 2]
