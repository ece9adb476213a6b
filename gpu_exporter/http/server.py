"""The HTTP front: connections, parsing, limits and TLS; what to answer is `app.App`'s.

One asyncio event loop in one thread holds every connection, so a connection that is idle,
slow or hostile costs a file descriptor and a few kilobytes, never a thread. Requests are
parsed by h11 (python-hyper's HTTP/1.1 protocol library, the parser of uvicorn), which
enforces the head limit while it reads, requires Host on HTTP/1.1 and frames bodies
exactly, so a body is never read as a request. Around it, what no library gives as a
whole (the measurements that chose this design are in docs/web-front.md):

- the head of each request (and the TLS handshake) must be complete within
  `read_header_timeout` of the moment the server starts waiting for it, or the
  connection is closed; a head cut off that way is never executed;
- at most `max_connections` connections: one more evicts the oldest connection that is
  waiting for a head or sending a body, and is answered 503 and closed when every
  connection is busy; at the file descriptor limit the accept loop backs off instead of
  spinning;
- bodies of GET and HEAD requests are read (after `admit`, the basic auth check, has
  let the request in) and discarded up to `MAX_BODY_BYTES` within the head's timeout,
  larger ones are refused (413); other methods are answered and the connection closed;
- at most `MAX_PIPELINED` requests in a row already received behind the one answered;
  a request of a client that has gone (or, pipelined, has ended its side) is not
  answered: it is never handed to the handler, and nothing is written to a connection
  that is gone;
- a client that goes away is one debug line and a count; no traceback ever reaches stderr;
- each connection refused or closed early is counted by its reason
  (`refusal_counts()`, served as gpu_exporter_http_connections_refused_total by
  `selfmetrics.HttpSelfMetrics`).
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import contextlib
import dataclasses
import errno
import itertools
import logging
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, get_args

import h11

from gpu_exporter.http.webconfig import LiveWebConfig
from gpu_exporter.model.catalogue import HttpRefusalReason
from gpu_exporter.model.logs import forget, log_once

log = logging.getLogger("gpu_exporter.web")

# The whole request head: request line and headers (Go's DefaultMaxHeaderBytes is 1 MiB;
# a scraper sends a few hundred bytes).
MAX_HEAD_BYTES = 16 * 1024
# A GET or HEAD body is read and thrown away up to this size, so the connection can be
# kept; a larger one is refused with 413 and the connection closed.
MAX_BODY_BYTES = 64 * 1024
# Sending a response (past what the socket buffers take), or reading a body, must be
# done within this.
IO_TIMEOUT_SECONDS = 10.0
# After an error answer the server reads (and drops) what the client still sends for at
# most this long and this much before it closes, so the client reads the answer instead
# of a reset (a lingering close, as Go and nginx do).
LINGER_SECONDS = 1.0
LINGER_BYTES = 256 * 1024
MAX_CONNECTIONS = 512
READ_CHUNK = 16 * 1024
# Requests already received behind the one being answered (HTTP/1.1 pipelining, which
# no scraper uses): past this many in a row, the next is answered 503 and the connection
# closed, so one connection's buffer of requests cannot queue renders without end.
MAX_PIPELINED = 8
# A new connection past `max_connections`, all busy: answered 503 and closed (not reset,
# so the client can tell "busy" from "gone"). The answer is written without waiting, and
# what the client sent is read for at most this long before the close, by at most
# MAX_REFUSING connections at once (past them, a reset as before).
REFUSE_LINGER_SECONDS = 1.0
MAX_REFUSING = 128
_BUSY_503 = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Retry-After: 1\r\nContent-Length: 39\r\nConnection: close\r\n\r\n"
    b"503 too many connections, retry later\n\n"
)
# Python's asyncio reads TLS through a 256 KiB buffer that every connection allocates
# and fills with zeros at once (asyncio.sslproto.SSLProtocol.max_size): 1,000 idle TLS
# connections took 286 MB. A TLS record holds 16 KiB of data at most, so a 16 KiB read
# buffer costs no throughput (docs/web-front.md, "Memory per TLS connection"). The one
# event loop of this process that speaks TLS is this one.
TLS_READ_BUFFER = 16 * 1024 + 256
asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER
# TCP states (linux/tcp_states.h) of a connection whose client has ended its side (FIN)
# or is gone (RST): CLOSE_WAIT, LAST_ACK, CLOSE.
_PEER_DONE_STATES = frozenset({8, 9, 7})
# At the file descriptor limit accept() fails at once while a connection waits: the loop
# waits this long before it tries again instead of spinning a core.
ACCEPT_BACKOFF_SECONDS = 0.25
_ACCEPT_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

_TLS_HANDSHAKE_RECORD = 0x16
_PLAIN_HTTP_TO_TLS = (
    b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
)


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    http_version: str
    # Names in lower case; repeated headers joined with ", " (RFC 9110 section 5.3).
    headers: dict[str, str]
    peer: str
    # Whether the client has gone (the connection closed or reset): a handler may skip
    # work nobody will read.
    gone: Callable[[], bool] = field(default=lambda: False, compare=False, repr=False)
    # The handler's `admit` (basic auth) let it in already, before its body was read.
    admitted: bool = False


@dataclass
class Response:
    status: int
    body: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)
    head_only: bool = False  # HEAD: the headers of the GET answer, no body
    close: bool = False


Handler = Callable[[Request], Awaitable[Response]]
# Asked before a request's body is read: None to let it in, or the answer (401, 429,
# 503) that refuses it, so a client that cannot log in never has its body read.
Admit = Callable[[Request], Awaitable[Response | None]]


@dataclass(frozen=True)
class Limits:
    read_header_timeout: float = 10.0
    max_connections: int = MAX_CONNECTIONS


def error_response(status: int, message: str = "", headers: dict[str, str] | None = None
                   ) -> Response:
    """Every error in plain text, and the connection closed after it."""
    text = message or _phrase(status)
    return Response(status, f"{status} {text}\n".encode("utf-8", "replace"),
                    [("Content-Type", "text/plain; charset=utf-8"),
                     *(headers or {}).items()], close=True)


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


class _Closed(Exception):
    """The connection is over (client gone, timed out, evicted): nothing more to send."""


class _Conn:
    """One connection's place in the table: what the cap and eviction look at."""

    def __init__(self, ident: int, peer: str) -> None:
        self.ident = ident
        self.peer = peer
        self.waiting = True  # for a request head (or the TLS handshake): may be evicted
        self.since = time.monotonic()
        self.abort: Callable[[], None] = lambda: None


class _ConnectionTable:
    """The open connections and the refusals: what the cap and eviction look at. Used
    on the event loop's thread only, except `counts()`, which scrapes call (a copy)."""

    def __init__(self, max_connections: int) -> None:
        self._max_connections = max_connections
        self.conns: dict[int, _Conn] = {}
        self._ids = itertools.count()
        # Connections refused or closed early, by reason: counted on the event loop's
        # thread, read (copied) by scrapes on theirs. Every reason from the start.
        self._refusals: dict[HttpRefusalReason, int] = dict.fromkeys(
            get_args(HttpRefusalReason), 0)

    def counts(self) -> dict[HttpRefusalReason, int]:
        return dict(self._refusals)

    def refused(self, reason: HttpRefusalReason) -> None:
        self._refusals[reason] += 1

    def admit(self, peer: str) -> _Conn | None:
        """A place for a new connection, evicting the oldest idle one at the cap; None
        when every connection is busy (the new one is refused, and counted)."""
        full = len(self.conns) >= self._max_connections
        if full:
            # Once per episode: a flood of connections is worth a line, not a line each.
            log_once(log, "connections-full", logging.WARNING,
                     "%d connections open, the most the server keeps: the oldest idle "
                     "one is closed for each new one, and new ones are refused while "
                     "all are busy", self._max_connections)
        elif len(self.conns) < self._max_connections // 2:
            forget(log, "connections-full")
        if full and not self.evict_one("evicted"):
            self.refused("connection_limit")
            log.debug("refused a connection from %s: %d connections, all busy",
                      peer, len(self.conns))
            return None
        conn = _Conn(next(self._ids), peer)
        self.conns[conn.ident] = conn
        return conn

    def evict_one(self, reason: HttpRefusalReason) -> bool:
        waiting = [c for c in self.conns.values() if c.waiting]
        if not waiting:
            return False
        oldest = min(waiting, key=lambda c: c.since)
        self.refused(reason)
        self.conns.pop(oldest.ident, None)
        oldest.abort()
        return True

    def close_all(self) -> None:
        for conn in list(self.conns.values()):
            conn.abort()


class _Exchange:
    """One connection's life: the TLS handshake, then requests read, checked and
    answered in turn until either side closes or a limit is hit."""

    def __init__(self, handler: Handler, admit: Admit | None, limits: Limits,
                 web: LiveWebConfig | None, table: _ConnectionTable,
                 stop: asyncio.Event) -> None:
        self._handler = handler
        self._admit = admit
        self._limits = limits
        self._web = web
        self._tls = web is not None and web.tls_enabled
        self._table = table
        self._refused = table.refused
        self._stop = stop

    async def run(self, sock: socket.socket, conn: _Conn) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Evicting a connection cancels its task, whose clean-up closes it (before there
        # is a transport, the socket itself may be registered with the event loop).
        task = asyncio.current_task()
        if task is not None:
            def abort() -> None:
                task.cancel()

            conn.abort = abort
        writer: asyncio.StreamWriter | None = None
        try:
            deadline = time.monotonic() + self._limits.read_header_timeout
            streams = await self._open(sock, conn, deadline)
            if streams is None:
                return
            reader, writer = streams
            await self._requests(reader, writer, conn, deadline)
        except _Closed:
            pass
        except (OSError, EOFError, TimeoutError, h11.ProtocolError) as exc:
            # ConnectionResetError, BrokenPipeError, ssl.SSLError...: the client's doing.
            log.debug("connection from %s ended: %s", conn.peer,
                      exc.__class__.__name__ + (f": {exc}" if str(exc) else ""))
        except asyncio.CancelledError:
            if self._stop is not None and self._stop.is_set():
                raise
            log.debug("closed the idle connection of %s to make room", conn.peer)
        except Exception:  # a bug of ours: logged through logging, never a bare traceback
            log.exception("connection from %s failed", conn.peer)
        finally:
            self._table.conns.pop(conn.ident, None)
            if writer is not None:
                writer.close()
            else:
                sock.close()

    async def _open(self, sock: socket.socket, conn: _Conn, deadline: float
                    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        loop = asyncio.get_running_loop()
        ctx: ssl.SSLContext | None = None
        if self._web is not None and self._tls:
            # Plain HTTP to the TLS port gets Go's 400, like exporter-toolkit.
            try:
                async with _deadline(deadline):
                    first = await _peek(sock)
            except TimeoutError:
                self._refused("head_timeout")
                raise
            if first and first[0] != _TLS_HANDSHAKE_RECORD:
                self._refused("tls_handshake")
                await loop.sock_sendall(sock, _PLAIN_HTTP_TO_TLS)
                await _linger_raw(sock)
                return None
            if not first:
                return None
            ctx = self._web.context()
        reader = asyncio.StreamReader(limit=READ_CHUNK, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        remaining = max(0.01, deadline - time.monotonic())
        if ctx is None:
            transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock)
        else:
            try:
                transport, _ = await loop.connect_accepted_socket(
                    lambda: protocol, sock, ssl=ctx, ssl_handshake_timeout=remaining)
            except (OSError, TimeoutError, ConnectionError) as exc:
                log.debug("TLS handshake with %s failed: %s", conn.peer, exc)
                # asyncio ends a handshake past its timeout with ConnectionAbortedError.
                late = isinstance(exc, TimeoutError) or time.monotonic() >= deadline
                self._refused("head_timeout" if late else "tls_handshake")
                return None
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        sans = self._web.client_allowed_sans() if self._web is not None else ()
        if ctx is not None and sans and not _san_allowed(
                transport.get_extra_info("peercert"), sans):
            log.debug("client certificate of %s has none of the allowed SANs", conn.peer)
            self._refused("tls_handshake")
            transport.abort()
            return None
        return reader, writer

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        conn: _Conn, deadline: float) -> None:
        h = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        first = True
        in_a_row = 0  # requests received, whole or in part, behind the one answered
        gone = _gone_check(writer)
        while True:
            conn.waiting, conn.since = True, time.monotonic()
            in_a_row = in_a_row + 1 if h.trailing_data[0] else 0
            try:
                async with _deadline(deadline):
                    event = await _next(h, reader)
            except TimeoutError:
                log.debug("closing the connection of %s: no complete request head within "
                          "%gs", conn.peer, self._limits.read_header_timeout)
                # A kept-alive connection that sent nothing more is a client's idle
                # connection ending as it should (Prometheus keeps them between scrapes);
                # a first head, or a part of one, that did not come in time is counted.
                if first or h.trailing_data[0]:
                    self._refused("head_timeout")
                return
            except h11.RemoteProtocolError as exc:
                # A partial head and then end of file is one too: answered, in case the
                # client only shut down its sending side.
                log.debug("bad request from %s: %s", conn.peer, exc)
                self._refused("head_too_large" if exc.error_status_hint == 431
                              else "malformed_request")
                await self._send(writer, h, None, error_response(
                    exc.error_status_hint, _protocol_message(exc)), conn)
                await _linger(writer, reader, conn)
                return
            if not isinstance(event, h11.Request):
                return  # the client closed between requests
            conn.waiting = False
            # Gone, or (for a request that came behind another) its sending side ended:
            # nobody reads the answer (a burst of pipelined requests and a close). A first
            # request after a half-close (`nc -N`) is still answered.
            if gone(pipelined=in_a_row > 0):
                self._client_gone(conn)
                return
            request = _request(event, conn.peer, gone)
            if in_a_row > MAX_PIPELINED:
                self._refused("pipeline_limit")
                response: Response | None = error_response(
                    503, f"more than {MAX_PIPELINED} pipelined requests")
            else:
                response, request = await self._prepare(h, reader, writer, event, request,
                                                         conn)
            if response is None:
                try:
                    response = await self._handler(request)
                except Exception:
                    log.exception("answering %s %s failed", request.method, request.target)
                    response = error_response(500)
            if gone():
                self._client_gone(conn)
                return
            await self._send(writer, h, request, response, conn)
            if h.their_state is not h11.DONE:
                # Unread request bytes: a plain close would reset the connection and the
                # client could lose the answer.
                await _linger(writer, reader, conn)
                return
            if response.close or h.our_state is not h11.DONE:
                return
            h.start_next_cycle()
            first = False
            deadline = time.monotonic() + self._limits.read_header_timeout

    def _client_gone(self, conn: _Conn) -> None:
        self._refused("client_gone")
        log.debug("client %s went away before its answer", conn.peer)

    async def _prepare(self, h: h11.Connection, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter, event: h11.Request, request: Request,
                       conn: _Conn) -> tuple[Response | None, Request]:
        """Refuse what is not a request we answer, admit it (basic auth) and then read
        the body of one we do."""
        if not event.http_version.startswith(b"1."):
            self._refused("malformed_request")
            return error_response(505, "HTTP Version Not Supported"), request
        names = [n for n, _ in event.headers]
        if b"transfer-encoding" in names and b"content-length" in names:
            # RFC 9112 section 6.1: a message with both is a smuggling attempt.
            self._refused("malformed_request")
            return error_response(400, "both Transfer-Encoding and Content-Length"), request
        if request.method not in ("GET", "HEAD"):
            return None, request  # the handler answers (401 or 405), the connection closes
        if h.their_state is h11.DONE:  # no body
            return None, request
        if self._admit is not None:
            denied = await self._admit(request)
            if denied is not None:
                denied.close = True  # its body unread: a lingering close follows
                return denied, request
            request = dataclasses.replace(request, admitted=True)
        return await _read_body(h, reader, writer, conn, self._refused,
                                self._limits.read_header_timeout), request

    async def _send(self, writer: asyncio.StreamWriter, h: h11.Connection,
                    request: Request | None, response: Response, conn: _Conn) -> None:
        headers = [("Date", _http_date()),
                   *((k, v) for k, v in response.headers if k.lower() != "content-length"),
                   ("Content-Length", str(len(response.body)))]
        if self._web is not None:
            headers += [(k, v) for k, v in self._web.headers().items()]
        if response.close:
            headers.append(("Connection", "close"))
        if request is not None:
            log.debug('%s "%s %s HTTP/%s" %d %d', conn.peer, request.method,
                      request.target, request.http_version, response.status,
                      len(response.body))
        data = _encode(h, response, headers)
        if data is None:  # h11 cannot frame it (the request line was unreadable)
            data = _raw_response(response.status, headers, response.body)
            response.close = True
        try:
            writer.write(data)
            if writer.transport.get_write_buffer_size():  # else drain has nothing to wait for
                async with asyncio.timeout(IO_TIMEOUT_SECONDS):
                    await writer.drain()
        except TimeoutError:
            log.debug("client %s did not read its response within %gs", conn.peer,
                      IO_TIMEOUT_SECONDS)
            self._refused("slow_client")
            raise _Closed from None
        except OSError as exc:
            self._refused("client_gone")
            log.debug("client %s went away mid-response: %s", conn.peer,
                      exc.__class__.__name__)
            raise _Closed from None
        if writer.transport.is_closing():
            # The write failed inside the transport (a reset): nothing more is sent, so
            # asyncio never warns of writes to a closed connection.
            self._refused("client_gone")
            log.debug("client %s went away mid-response", conn.peer)
            raise _Closed


async def _read_body(h: h11.Connection, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, conn: _Conn,
                     refused: Callable[[HttpRefusalReason], None], timeout: float
                     ) -> Response | None:
    """Read and drop a GET or HEAD body: None once it is read, or the answer that refuses
    it. Like a head it must arrive within `timeout`, and while it arrives the connection
    may be evicted (`waiting`), so slow bodies cannot hold the slots."""
    received = 0
    conn.waiting, conn.since = True, time.monotonic()
    try:
        async with asyncio.timeout(timeout):
            while True:
                if h.they_are_waiting_for_100_continue:
                    writer.write(h.send(h11.InformationalResponse(
                        status_code=100, headers=[])) or b"")
                nxt = await _next(h, reader)
                if isinstance(nxt, h11.EndOfMessage):
                    return None
                if isinstance(nxt, h11.Data):
                    received += len(nxt.data)
                    if received > MAX_BODY_BYTES:
                        refused("body_too_large")
                        return error_response(413, "request body too large")
                    continue
                raise _Closed
    except TimeoutError:
        log.debug("client %s did not send its request body within %gs", conn.peer, timeout)
        refused("slow_client")
        raise _Closed from None
    except h11.RemoteProtocolError as exc:
        # A malformed chunked body (or a body cut off by the end of the connection).
        log.debug("bad request body from %s: %s", conn.peer, exc)
        refused("malformed_request")
        return error_response(400, "malformed request body")
    finally:
        conn.waiting = False


def _gone_check(writer: asyncio.StreamWriter) -> Callable[..., bool]:
    """`gone()`: the connection is closed or reset; `gone(pipelined=True)` also when the
    client has ended its sending side (TCP's CLOSE_WAIT, seen without reading the
    requests still queued before its end)."""
    transport = writer.transport
    raw = transport.get_extra_info("socket")

    def gone(pipelined: bool = False) -> bool:
        if transport.is_closing():
            return True
        if raw is None:
            return False
        try:
            state = raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
        except OSError:
            return True
        return state == 7 or (pipelined and state in _PEER_DONE_STATES)

    return gone


class HttpServer:
    """`serve_forever()` in a thread of its own, `shutdown()` and `server_close()` from
    another, like socketserver's servers. The listener and the accept loop; the table
    of connections keeps the cap, and an `_Exchange` serves each connection."""

    def __init__(self, address: tuple[str, int], handler: Handler, limits: Limits,
                 web: LiveWebConfig | None = None, admit: Admit | None = None) -> None:
        self._table = _ConnectionTable(limits.max_connections)
        self._refusing = 0  # connections being answered 503 past the cap
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = threading.Event()
        # Bound to the loop on its first use (asyncio.Event since 3.10): shutdown() may
        # come before serve_forever() has started it.
        self._stop = asyncio.Event()
        self._exchange = _Exchange(handler, admit, limits, web, self._table, self._stop)
        self._tls = web is not None and web.tls_enabled
        self.socket = _listen(address)
        self.server_address = self.socket.getsockname()
        self._stop_requested = False

    def refusal_counts(self) -> dict[HttpRefusalReason, int]:
        """The connections refused or closed early so far, by reason."""
        return self._table.counts()

    # --- life cycle, from other threads

    def serve_forever(self) -> None:
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(_loop_exception)
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            self._stopped.set()

    def shutdown(self) -> None:
        self._stop_requested = True
        loop = self._loop
        if loop is None:
            return  # serve_forever has not started: it returns at once when it does
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(self._stop.set)
        self._stopped.wait(10)

    def server_close(self) -> None:
        self.socket.close()

    # --- the event loop

    async def _serve(self) -> None:
        if self._stop_requested:
            return
        accepting = asyncio.create_task(self._accept_loop())
        await self._stop.wait()
        accepting.cancel()
        self._table.close_all()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        self.socket.setblocking(False)
        exhausted = False
        while True:
            try:
                sock, addr = await loop.sock_accept(self.socket)
            except OSError as exc:
                if exc.errno == errno.ECONNABORTED:  # that client left before its turn
                    continue
                if exc.errno not in _ACCEPT_EXHAUSTED:
                    log.debug("accept failed: %s", exc)
                    await asyncio.sleep(ACCEPT_BACKOFF_SECONDS)
                    continue
                if not exhausted:
                    log.warning("cannot accept connections: %s (the file descriptor limit, "
                                "ulimit -n); closing the oldest idle connection and retrying",
                                exc.strerror or exc)
                    exhausted = True
                self._table.evict_one("file_descriptor_limit")
                await asyncio.sleep(ACCEPT_BACKOFF_SECONDS)
                continue
            exhausted = False
            peer = str(addr[0]) if isinstance(addr, tuple) else str(addr)
            conn = self._table.admit(peer)
            if conn is None:
                self._refuse(sock)
                continue
            # Held here: the event loop keeps only weak references to tasks.
            task = asyncio.create_task(self._exchange.run(sock, conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            # sock_accept returns without yielding while connections wait in the backlog:
            # a turn for the others (requests in progress, an evicted connection closing)
            # before the next one.
            await asyncio.sleep(0)


    def _refuse(self, sock: socket.socket) -> None:
        """Past the cap, every connection busy: a 503 and a close, without waiting (a
        reset when MAX_REFUSING are being refused already). Over TLS, only the close: a
        503 would need a handshake, the costliest part of a connection."""
        if self._refusing >= MAX_REFUSING:
            _reset(sock)
            return
        self._refusing += 1
        task = asyncio.create_task(self._refusal(sock))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _refusal(self, sock: socket.socket) -> None:
        try:
            if not self._tls:
                with contextlib.suppress(OSError):
                    sock.send(_BUSY_503)  # a new socket's buffer takes it whole
            await _linger_raw(sock, REFUSE_LINGER_SECONDS)
        finally:
            self._refusing -= 1
            sock.close()


def _encode(h: h11.Connection, response: Response, headers: list[tuple[str, str]]
            ) -> bytes | None:
    try:
        out = h.send(h11.Response(status_code=response.status, headers=headers,
                                  reason=_phrase(response.status).encode()))
        if response.body and not response.head_only and h.our_state is h11.SEND_BODY:
            out = (out or b"") + (h.send(h11.Data(data=response.body)) or b"")
        out = (out or b"") + (h.send(h11.EndOfMessage()) or b"")
        return out
    except h11.LocalProtocolError:
        return None


def _raw_response(status: int, headers: list[tuple[str, str]], body: bytes) -> bytes:
    head = f"HTTP/1.1 {status} {_phrase(status)}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in headers)
    if not any(k.lower() == "connection" for k, _ in headers):
        head += "Connection: close\r\n"
    return head.encode("latin-1") + b"\r\n" + body


async def _next(h: h11.Connection, reader: asyncio.StreamReader) -> Any:
    """The next h11 event, reading as needed: at most READ_CHUNK at a time, and while a
    head is awaited no more than MAX_HEAD_BYTES in all. (h11 measures only a head it has
    not found the end of, so a longer head read in one go, up to two chunks, would pass.)"""
    while True:
        event = h.next_event()
        if event is h11.NEED_DATA:
            size = READ_CHUNK
            if h.their_state is h11.IDLE:
                size = min(size, MAX_HEAD_BYTES - len(h.trailing_data[0]))
                if size <= 0:
                    raise h11.RemoteProtocolError("request head too long",
                                                  error_status_hint=431)
            h.receive_data(await reader.read(size))
            continue
        if event is h11.PAUSED:
            return None
        return event


def _protocol_message(exc: h11.RemoteProtocolError) -> str:
    text = str(exc)
    if exc.error_status_hint == 431 or "too long" in text:
        return "Request Header Fields Too Large"
    if text.startswith("illegal request line"):
        return "malformed request line"
    if "Host" in text:
        return text.rstrip(".")
    return "malformed request"


def _request(event: h11.Request, peer: str, gone: Callable[[], bool]) -> Request:
    headers: dict[str, str] = {}
    for name, value in event.headers:
        key = name.decode("latin-1")
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return Request(event.method.decode("latin-1"), event.target.decode("latin-1"),
                   event.http_version.decode("latin-1"), headers, peer, gone)


def _deadline(when: float) -> asyncio.Timeout:
    """A timeout at `when` on time.monotonic()'s clock."""
    return asyncio.timeout_at(asyncio.get_running_loop().time() + (when - time.monotonic()))


_date_cache: tuple[int, str] = (0, "")


def _http_date() -> str:
    # One formatting a second: the Date header has a resolution of a second.
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, formatdate(now, usegmt=True))
    return _date_cache[1]


async def _peek(sock: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(sock.fileno(), readable)
    try:
        await ready
    finally:
        loop.remove_reader(sock.fileno())
    try:
        return sock.recv(1, socket.MSG_PEEK)
    except OSError:
        return b""


async def _linger_raw(sock: socket.socket, seconds: float = LINGER_SECONDS) -> None:
    loop = asyncio.get_running_loop()
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
    read = 0
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(seconds):
            while read < LINGER_BYTES and (chunk := await loop.sock_recv(sock, READ_CHUNK)):
                read += len(chunk)


async def _linger(writer: asyncio.StreamWriter, reader: asyncio.StreamReader,
                  conn: _Conn | None = None) -> None:
    if conn is not None:
        # Nothing more is owed to it: the first to make room for a new connection (600
        # TLS clients refused with 401 before their slow bodies lingered a second each,
        # and held every place).
        conn.waiting, conn.since = True, 0.0
    with contextlib.suppress(OSError, RuntimeError, NotImplementedError):
        if writer.can_write_eof():
            writer.write_eof()
    read = 0
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(LINGER_SECONDS):
            while read < LINGER_BYTES and (chunk := await reader.read(READ_CHUNK)):
                read += len(chunk)


def _reset(sock: socket.socket) -> None:
    """Close at once, with a reset: nothing of ours is owed to this client."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()


def _san_allowed(cert: Any, allowed: tuple[str, ...]) -> bool:
    names = {value for _kind, value in (cert or {}).get("subjectAltName", ())}
    return any(a in names for a in allowed)


def _listen(address: tuple[str, int]) -> socket.socket:
    host, port = address
    family = socket.AF_INET6 if ":" in host or host == "" else socket.AF_INET
    if host == "":
        host = "::"
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            # Dual stack: ":9445" answers on IPv4 and IPv6 like the Go exporters.
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def _loop_exception(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """What asyncio would print with a traceback: one line through logging (at debug for a
    client's connection trouble, which is not ours to fix)."""
    exc = context.get("exception")
    message = context.get("message", "")
    if isinstance(exc, OSError | asyncio.CancelledError):
        log.debug("%s: %s", message, exc)
    else:
        log.error("%s%s", message, f": {exc!r}" if exc is not None else "")
