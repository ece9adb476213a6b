"""HTTP server: /metrics (text or OpenMetrics, gzip on request, `name[]` filtering), /,
/healthz."""

from __future__ import annotations

import contextlib
import heapq
import html
import itertools
import logging
import re
import socket
import ssl
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import urlsplit

from prometheus_client.exposition import make_wsgi_app
from prometheus_client.registry import CollectorRegistry

from gpu_exporter import __version__, flagtypes
from gpu_exporter.settings import ConfigError
from gpu_exporter.webconfig import BasicAuth, CertificateReloader, WebConfig

log = logging.getLogger("gpu_exporter.web")

# A client that sends nothing for this long is dropped, so slow clients hold a thread
# for a bounded time only.
REQUEST_TIMEOUT_SECONDS = 10.0
MAX_HEADER_BYTES = 16 * 1024
# The socket timeout bounds each read, not the whole request head: a client trickling a
# byte every few seconds (slowloris) would hold its thread for ever. The head (and the
# TLS handshake) must be complete within this, like Go's ReadHeaderTimeout.
READ_HEADER_TIMEOUT_SECONDS = 10.0


class _HeadDeadlines:
    """One thread for the whole server that shuts down connections whose request head has
    not arrived by its deadline; the blocked read then sees end-of-file."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._heap: list[tuple[float, int]] = []
        self._socks: dict[int, socket.socket] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, sock: socket.socket) -> int:
        with self._lock:
            token = next(self._ids)
            self._socks[token] = sock
            heapq.heappush(self._heap, (time.monotonic() + self.seconds, token))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="http-deadlines",
                                                daemon=True)
                self._thread.start()
            self._wake.notify()
            return token

    def done(self, token: int) -> None:
        with self._lock:
            self._socks.pop(token, None)

    def _run(self) -> None:
        with self._lock:
            while True:
                while self._heap and self._heap[0][1] not in self._socks:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._wake.wait()
                    continue
                deadline, token = self._heap[0]
                now = time.monotonic()
                if deadline > now:
                    self._wake.wait(deadline - now)
                    continue
                heapq.heappop(self._heap)
                sock = self._socks.pop(token)
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


class ListenError(Exception):
    """The address cannot be bound (in use, no permission): start-up fault, exit 3."""


def parse_listen_address(value: str) -> tuple[str, int]:
    """`:9445`, `0.0.0.0:9445`, `[::1]:9445`, `localhost:9445` to (host, port)."""
    try:
        return flagtypes.split_listen_address(value)
    except ValueError as exc:
        raise ConfigError(f"invalid --web.listen-address {exc}") from None


# METHOD SP request-target SP HTTP/x.y CRLF, the method an RFC 9110 token (RFC 9112
# section 3); the target visible ASCII, a path or an absolute URL for GET and HEAD.
_REQUEST_LINE = re.compile(
    rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+ [\x21-\x7e]+ HTTP/[0-9]\.[0-9]\r?\n")
_TARGET = re.compile(r"/|https?://")

_TLS_HANDSHAKE_RECORD = 0x16
_PLAIN_HTTP_TO_TLS = (
    b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    tls: CertificateReloader | None = None
    client_allowed_sans: tuple[str, ...] = ()
    head_deadlines = _HeadDeadlines(READ_HEADER_TIMEOUT_SECONDS)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # Runs in the connection's own thread: a slow or stalled TLS handshake holds only
        # this thread, never the accept loop.
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(REQUEST_TIMEOUT_SECONDS)
        token = self.head_deadlines.watch(request)
        try:
            first = request.recv(1, socket.MSG_PEEK)
            if first and first[0] != _TLS_HANDSHAKE_RECORD:
                request.sendall(_PLAIN_HTTP_TO_TLS)
                return
            conn = self.tls.context().wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError) as exc:
            log.debug("TLS handshake with %s failed: %s", client_address[0], exc)
            return
        finally:
            self.head_deadlines.done(token)
        try:
            if self.client_allowed_sans and not _san_allowed(
                    conn.getpeercert(), self.client_allowed_sans):
                log.debug("client certificate of %s has none of the allowed SANs",
                          client_address[0])
                return
            super().finish_request(conn, client_address)
        except OSError as exc:
            # A client that drops the TLS session mid-request (ssl.SSLError is an OSError)
            # is the client's business, not a traceback on stderr.
            log.debug("TLS connection with %s ended: %s", client_address[0], exc)
        finally:
            conn.close()

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        host = address[0]
        self.address_family = socket.AF_INET6 if ":" in host or host == "" else socket.AF_INET
        if host == "":
            address = ("::", address[1])
        super().__init__(address, handler)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            # Dual stack: ":9445" answers on IPv4 and IPv6 like the Go exporters.
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def _san_allowed(cert: Any, allowed: tuple[str, ...]) -> bool:
    names = {value for _kind, value in (cert or {}).get("subjectAltName", ())}
    return any(a in names for a in allowed)


class Handler(BaseHTTPRequestHandler):
    registry: ClassVar[CollectorRegistry]
    # prometheus_client's own /metrics application: content negotiation (text,
    # OpenMetrics), gzip, and `name[]` filtering, exactly as the library serves them.
    metrics_app: ClassVar[Any]
    telemetry_path: ClassVar[str] = "/metrics"
    auth: ClassVar[BasicAuth | None] = None
    config_headers: ClassVar[dict[str, str]] = {}
    server_version = f"gpu-exporter/{__version__}"
    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate writes: with Nagle on, a keep-alive scraper
    # (Prometheus) waits out its delayed ACK, 40 ms, for the end of every response.
    disable_nagle_algorithm = True
    timeout = REQUEST_TIMEOUT_SECONDS
    raw_requestline: bytes  # set by BaseHTTPRequestHandler.handle_one_request

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def handle_one_request(self) -> None:
        server: _Server = self.server  # type: ignore[assignment]
        self._head_token = server.head_deadlines.watch(self.connection)
        try:
            super().handle_one_request()
        finally:
            server.head_deadlines.done(self._head_token)

    def parse_request(self) -> bool:
        raw = self.raw_requestline
        if raw.strip() and _REQUEST_LINE.fullmatch(raw) is None:
            # Python would take an HTTP/0.9 line and any method token; what a client
            # means by those is anybody's guess.
            self.command, self.request_version = "", "HTTP/1.1"
            self.requestline = repr(raw.rstrip(b"\r\n"))[2:-1]
            self.send_error(400, "malformed request line")
            return False
        ok = super().parse_request()
        server: _Server = self.server  # type: ignore[assignment]
        server.head_deadlines.done(self._head_token)  # the head is in: no deadline now
        if not ok:
            return False
        if sum(len(k) + len(v) for k, v in self.headers.items()) > MAX_HEADER_BYTES:
            self.send_error(431, "Request Header Fields Too Large")
            return False
        if self.command in ("GET", "HEAD"):
            if not _TARGET.match(self.path):
                self.send_error(400, "malformed request target")
                return False
            if self.path[0] != "/":  # the absolute form, from a proxy
                url = urlsplit(self.path)
                self.path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        else:
            # Every other method, known or not, the same way (the body is not read: the
            # connection closes after the answer).
            self.close_connection = True
            if self._authorized(self.path.split("?", 1)[0]):
                self._send(405, b"405 method not allowed\n", "text/plain; charset=utf-8",
                           extra={"Allow": "GET, HEAD", "Connection": "close"})
            return False
        return True

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """Every error in plain text, with a status line (Python's default is an HTML
        page, and no status line at all for a request line it could not read)."""
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = ""
        if self.request_version == "HTTP/0.9":
            self.request_version = "HTTP/1.1"
        self.log_error("code %d, message %s", code, message)
        self.close_connection = True
        body = f"{code} {message or phrase}\n".encode("utf-8", "replace")
        self._send(code, body, "text/plain; charset=utf-8",
                   head=self.command == "HEAD",
                   extra={"Connection": "close"})

    def _send(self, status: int, body: bytes, content_type: str, head: bool = False,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in {**self.config_headers, **(extra or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _authorized(self, path: str, head: bool = False) -> bool:
        # /healthz stays open so liveness probes and the image's HEALTHCHECK need no
        # password; it tells nothing but "ok".
        if self.auth is None or path == "/healthz":
            return True
        if self.auth.check(self.headers.get("Authorization")):
            return True
        # One answer whatever was wrong (user, password, scheme, encoding).
        self._send(401, b"Unauthorized\n", "text/plain; charset=utf-8", head,
                   {"WWW-Authenticate": 'Basic realm="gpu-exporter"'})
        return False

    def _route(self, head: bool) -> None:
        path = self.path.split("?", 1)[0]
        if not self._authorized(path, head):
            return
        if path == self.telemetry_path:
            self._metrics(head)
        elif path == "/":
            self._send(200, landing_page(self.telemetry_path).encode(),
                       "text/html; charset=utf-8", head)
        elif path == "/healthz":
            self._send(200, b"ok\n", "text/plain; charset=utf-8", head)
        else:
            self._send(404, b"404 page not found\n", "text/plain; charset=utf-8", head)

    def _metrics(self, head: bool) -> None:
        answer: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]]) -> None:
            answer["status"], answer["headers"] = int(status.split()[0]), dict(headers)

        environ = {
            "REQUEST_METHOD": "GET", "PATH_INFO": self.telemetry_path,
            "QUERY_STRING": self.path.partition("?")[2],
            "HTTP_ACCEPT": self.headers.get("Accept", ""),
            "HTTP_ACCEPT_ENCODING": self.headers.get("Accept-Encoding", ""),
        }
        body = b"".join(self.metrics_app(environ, start_response))
        headers = answer["headers"]
        content_type = headers.pop("Content-Type", "text/plain; charset=utf-8")
        self._send(answer["status"], body, content_type, head, headers)

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)



def landing_page(telemetry_path: str) -> str:
    path = html.escape(telemetry_path)
    return (
        "<!DOCTYPE html><html><head><title>gpu-exporter</title></head><body>"
        f"<h1>gpu-exporter {html.escape(__version__)}</h1>"
        "<p>Prometheus exporter for GPU fleets.</p><ul>"
        f'<li><a href="{path}">{path}</a></li>'
        '<li><a href="/healthz">/healthz</a></li>'
        "</ul></body></html>\n"
    )


def make_server(
    listen_address: str, registry: CollectorRegistry, telemetry_path: str = "/metrics",
    web_config: WebConfig | None = None,
    read_header_timeout: float = READ_HEADER_TIMEOUT_SECONDS,
) -> ThreadingHTTPServer:
    host, port = parse_listen_address(listen_address)
    web_config = web_config or WebConfig()
    handler = type("BoundHandler", (Handler,), {
        "registry": registry, "metrics_app": staticmethod(make_wsgi_app(registry)),
        "telemetry_path": telemetry_path,
        "auth": BasicAuth(web_config.basic_auth_users) if web_config.auth_required else None,
        "config_headers": dict(web_config.headers),
    })
    tls = None
    if web_config.tls is not None:
        tls = CertificateReloader(web_config.tls, lambda msg: log.warning("%s", msg))
    elif web_config.auth_required:
        log.warning("basic auth without TLS: passwords cross the network in clear text; "
                    "add tls_server_config to %s", web_config.source)
    try:
        server = _Server((host, port), handler)
    except OSError as exc:
        raise ListenError(f"cannot listen on {listen_address} (--web.listen-address): "
                          f"{exc.strerror or exc}") from exc
    server.tls = tls
    server.head_deadlines = _HeadDeadlines(read_header_timeout)
    server.client_allowed_sans = web_config.tls.client_allowed_sans if web_config.tls else ()
    return server

