"""What the exporter answers: /metrics (text or OpenMetrics, gzip on request, `name[]`
filtering), /, /healthz, behind basic auth when configured. Connections, parsing, limits
and TLS are the front's (gpu_exporter/http/server.py)."""

from __future__ import annotations

import asyncio
import gzip
import html
import logging
import math
import re
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client.exposition import choose_encoder, generate_latest, make_wsgi_app
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.registry import CollectorRegistry

from gpu_exporter import __version__
from gpu_exporter.http.server import HttpServer, Limits, Request, Response, error_response
from gpu_exporter.http.webconfig import (
    AuthBusy,
    AuthLimited,
    BasicAuth,
    LiveWebConfig,
    WebConfig,
)
from gpu_exporter.model import flagtypes
from gpu_exporter.model.settings import ConfigError
from gpu_exporter.scrape.render import ESCAPINGS, TextRenderer

log = logging.getLogger("gpu_exporter.web")

READ_HEADER_TIMEOUT_SECONDS = 10.0
# Scrapes (prometheus_client's exposition, which reads the collectors) run in this many
# threads; a connection has at most one request in progress, so at most max_connections
# wait for them.
SCRAPE_WORKERS = 4

_Render = Callable[[CollectorRegistry], bytes]


class ListenError(Exception):
    """The address cannot be bound (in use, no permission): start-up fault, exit 3."""


def parse_listen_address(value: str) -> tuple[str, int]:
    """`:9445`, `0.0.0.0:9445`, `[::1]:9445`, `localhost:9445` to (host, port)."""
    try:
        return flagtypes.split_listen_address(value)
    except ValueError as exc:
        raise ConfigError(f"invalid --web.listen-address {exc}") from None


# The request target of a GET or HEAD: a path, or an absolute URL from a proxy.
_TARGET = re.compile(r"/|https?://")
_TEXT = "text/plain; charset=utf-8"
# The OpenMetrics versions prometheus_client writes; an Accept naming another is passed
# over (as Prometheus' Go client does), not echoed into the Content-Type.
OPENMETRICS_VERSIONS = frozenset({"1.0.0", "2.0.0"})


def _text(status: int, body: bytes, head: bool, headers: list[tuple[str, str]] | None = None,
          content_type: str = _TEXT, close: bool = False) -> Response:
    return Response(status, body, [("Content-Type", content_type), *(headers or [])],
                    head_only=head, close=close)


# gzip's fastest level for the answers rendered here (Prometheus asks for gzip on every
# scrape): against the default 9, 5x less CPU for an answer about 18% larger
# (docs/performance.md, issue #26; the same text once decompressed).
GZIP_LEVEL = 1


class App:
    """The answers, for the front to send. Blocking work (a scrape, a bcrypt check) runs
    in bounded thread pools, never on the front's event loop."""

    def __init__(self, registry: CollectorRegistry, telemetry_path: str = "/metrics",
                 auth: BasicAuth | None = None, workers: int = SCRAPE_WORKERS,
                 web: LiveWebConfig | None = None) -> None:
        self.registry = registry
        # prometheus_client's own /metrics application: content negotiation (text,
        # OpenMetrics), gzip, and `name[]` filtering, exactly as the library serves them.
        self.metrics_app = make_wsgi_app(registry)
        # Every answer a scraper asks for by default (text, OpenMetrics 1.0.0, any
        # escaping; no `name[]`): the library's bytes, rendered faster.
        self.text = TextRenderer()
        self.telemetry_path = telemetry_path
        self._auth = auth
        # The web config in effect when serving (re-read when its file changes): its
        # users replace `auth`.
        self.web = web
        self._workers = ThreadPoolExecutor(max_workers=workers,
                                           thread_name_prefix="http-scrape")
        self._shared = SharedRenders(self._workers)

    async def __call__(self, request: Request) -> Response:
        head = request.method == "HEAD"
        target = request.target
        if request.method not in ("GET", "HEAD"):
            # Every other method, known or not, the same way (the body is not read: the
            # connection closes after the answer).
            denied = await self._denied(request, target.split("?", 1)[0], False)
            if denied is not None:
                denied.close = True
                return denied
            return _text(405, b"405 method not allowed\n", False, [("Allow", "GET, HEAD")],
                         close=True)
        if not _TARGET.match(target):
            return error_response(400, "malformed request target")
        if target[0] != "/":  # the absolute form, from a proxy
            url = urlsplit(target)
            target = (url.path or "/") + (f"?{url.query}" if url.query else "")
        path, _, query = target.partition("?")
        denied = await self._denied(request, path, head)
        if denied is not None:
            return denied
        if path == self.telemetry_path:
            if request.gone():  # nobody would read it: not rendered
                return error_response(503, "client gone")
            return await self._metrics(query, request.headers, head)
        if path == "/":
            return _text(200, landing_page(self.telemetry_path).encode(), head,
                         content_type="text/html; charset=utf-8")
        if path == "/healthz":
            return _text(200, b"ok\n", head)
        return _text(404, b"404 page not found\n", head)

    @property
    def auth(self) -> BasicAuth | None:
        if self.web is not None:
            self.web.refresh()
            return self.web.auth
        return self._auth

    async def admit(self, request: Request) -> Response | None:
        """The front asks before it reads a request's body: the answer that refuses it
        (401, 429, 503), or None."""
        return await self._denied(request, request.target.partition("?")[0],
                                  request.method == "HEAD")

    async def _denied(self, request: Request, path: str, head: bool) -> Response | None:
        # /healthz stays open so liveness probes and the image's HEALTHCHECK need no
        # password; it tells nothing but "ok".
        auth = self.auth
        if auth is None or path == "/healthz" or request.admitted:
            return None
        try:
            if await auth.check_async(request.headers.get("authorization"), request.peer):
                return None
        except AuthBusy:
            return _text(503, b"503 too many password checks at once, retry later\n", head,
                         [("Retry-After", "1")], close=True)
        except AuthLimited as exc:
            # The address spent its budget of failed checks: no bcrypt (as nginx's
            # limit_req answers, with the status RFC 6585 gives it).
            return _text(429, b"429 too many failed logins from this address\n", head,
                         [("Retry-After", str(max(1, math.ceil(exc.retry_after))))],
                         close=True)
        # One answer whatever was wrong (user, password, scheme, encoding); the
        # connection closes after it, so a client that never authenticates holds no slot
        # (and its pipelined requests are not answered one 401 at a time).
        return _text(401, b"Unauthorized\n", head,
                     [("WWW-Authenticate", 'Basic realm="gpu-exporter"')], close=True)

    async def _metrics(self, query: str, headers: dict[str, str], head: bool) -> Response:
        accept = accept_known_versions(headers.get("accept", ""))
        gzipped = gzip_wanted(headers.get("accept-encoding", ""))
        render = self._own_rendering(accept) if "name[]" not in parse_qs(query) else None
        if render is None:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._workers, self._library_metrics, query,
                                              accept, gzipped, head)
        draw, content_type = render

        def page() -> bytes:
            body = draw(self.registry)
            return gzip.compress(body, compresslevel=GZIP_LEVEL) if gzipped else body

        body = await self._shared.get((content_type, gzipped), page)
        out = [("Content-Type", content_type)]
        if gzipped:
            out.append(("Content-Encoding", "gzip"))
        return Response(200, body, out, head_only=head)

    def _library_metrics(self, query: str, accept: str, gzipped: bool, head: bool
                         ) -> Response:
        """prometheus_client's own answer: `name[]`, and the variants not rendered here."""
        answer: dict[str, Any] = {}

        def start_response(status: str, response_headers: list[tuple[str, str]]) -> None:
            answer["status"], answer["headers"] = int(status.split()[0]), response_headers

        environ = {
            "REQUEST_METHOD": "GET", "PATH_INFO": self.telemetry_path,
            "QUERY_STRING": query,
            "HTTP_ACCEPT": accept,
            "HTTP_ACCEPT_ENCODING": "gzip" if gzipped else "",
        }
        body = b"".join(self.metrics_app(environ, start_response))
        return Response(answer["status"], body, list(answer["headers"]), head_only=head)


    def _own_rendering(self, accept: str) -> tuple[_Render, str] | None:
        """gpu_exporter/scrape/render.py's renderer, and prometheus_client's
        Content-Type, for what prometheus_client would write: text (0.0.4, or 1.0.0 with
        its escaping) or OpenMetrics 1.0.0 with its escaping. That is what every
        scraper asks for by default (tests/core/test_render.py pins their Accept
        headers); None for the rest (OpenMetrics 2.0.0)."""
        encoder, content_type = choose_encoder(accept)
        if encoder is generate_latest:
            return self.text.render, content_type
        if not isinstance(encoder, partial):
            return None
        escaping = encoder.keywords.get("escaping")
        if escaping not in ESCAPINGS:
            return None
        if encoder.func is generate_latest and encoder.keywords.keys() == {"escaping"}:
            return partial(self.text.render, escaping=escaping), content_type
        if (encoder.func is openmetrics_latest
                and encoder.keywords == {"escaping": escaping, "version": "1.0.0"}):
            return partial(self.text.render_openmetrics, escaping=escaping), content_type
        return None


def gzip_wanted(accept_encoding: str) -> bool:
    """gzip is listed as a coding with a quality above 0 (`gzip;q=0` means "not gzip",
    RFC 9110 section 12.5.3); a quality that is not a number disqualifies its entry."""
    for entry in accept_encoding.split(","):
        coding, *params = entry.split(";")
        if coding.strip().lower() != "gzip":
            continue
        quality = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = float(value.strip())
                except ValueError:
                    quality = 0.0
        if quality > 0:
            return True
    return False


def accept_known_versions(accept: str) -> str:
    """The Accept header less the OpenMetrics entries of a version prometheus_client does
    not write (it would echo any version into the Content-Type)."""
    kept = []
    for entry in accept.split(","):
        media, *params = entry.split(";")
        if media.strip().lower() == "application/openmetrics-text":
            versions = [p.partition("=")[2].strip() for p in params
                        if p.partition("=")[0].strip() == "version"]
            if versions and versions[0] not in OPENMETRICS_VERSIONS:
                continue
        kept.append(entry)
    return ",".join(kept)


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
) -> HttpServer:
    host, port = parse_listen_address(listen_address)
    web_config = web_config or WebConfig()
    if web_config.tls is None and web_config.auth_required:
        log.warning("basic auth without TLS: passwords cross the network in clear text; "
                    "add tls_server_config to %s", web_config.source)
    web = LiveWebConfig(web_config, lambda msg: log.warning("%s", msg),
                        lambda msg: log.info("%s", msg))
    app = App(registry, telemetry_path, web=web)
    try:
        return HttpServer((host, port), app, Limits(read_header_timeout=read_header_timeout),
                          web=web, admit=app.admit)
    except OSError as exc:
        raise ListenError(f"cannot listen on {listen_address} (--web.listen-address): "
                          f"{exc.strerror or exc}") from exc


class SharedRenders:
    """Scrapes asking for the same page (the same rendering, gzipped or not) while it is
    being rendered share one rendering: the next, which starts when the one in progress
    ends, so no scrape is answered with a collection that began before it asked. However
    many scrapers (or a burst of 600 connections' requests) wait, two renderings of a
    page run or wait at a time, on one scrape worker."""

    def __init__(self, workers: ThreadPoolExecutor) -> None:
        self._workers = workers
        self._running: dict[Hashable, asyncio.Future[bytes]] = {}
        self._next: dict[Hashable, tuple[asyncio.Future[bytes], Callable[[], bytes]]] = {}

    async def get(self, key: Hashable, make: Callable[[], bytes]) -> bytes:
        loop = asyncio.get_running_loop()
        if key not in self._running:
            future = self._start(loop, key, make)
        else:
            pending = self._next.get(key)
            if pending is None:
                pending = self._next[key] = (loop.create_future(), make)
                pending[0].add_done_callback(_retrieve)
            future = pending[0]
        # A waiter that goes (its connection closed) leaves the rendering to the others.
        return await asyncio.shield(future)

    def _start(self, loop: asyncio.AbstractEventLoop, key: Hashable,
               make: Callable[[], bytes]) -> asyncio.Future[bytes]:
        future = loop.run_in_executor(self._workers, make)
        self._running[key] = future
        future.add_done_callback(_retrieve)
        future.add_done_callback(lambda _f: self._finished(loop, key))
        return future

    def _finished(self, loop: asyncio.AbstractEventLoop, key: Hashable) -> None:
        del self._running[key]
        pending = self._next.pop(key, None)
        if pending is None:
            return
        waiting, make = pending
        future = self._start(loop, key, make)

        def hand_over(done: asyncio.Future[bytes]) -> None:
            if waiting.done():
                return
            if done.cancelled():
                waiting.cancel()
            elif (exc := done.exception()) is not None:
                waiting.set_exception(exc)
            else:
                waiting.set_result(done.result())

        future.add_done_callback(hand_over)


def _retrieve(future: asyncio.Future[bytes]) -> None:
    """Mark a failure as seen: each waiter gets it (a 500), none is left for asyncio to
    report as never retrieved."""
    if not future.cancelled():
        future.exception()
