"""What the exporter answers: /metrics (text or OpenMetrics, gzip on request, `name[]`
filtering), /, /healthz, behind basic auth when configured. Connections, parsing, limits
and TLS are the front's (gpu_exporter/http/server.py)."""

from __future__ import annotations

import asyncio
import gzip
import html
import logging
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client.exposition import choose_encoder, generate_latest, make_wsgi_app
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.registry import CollectorRegistry

from gpu_exporter import __version__
from gpu_exporter.http.server import HttpServer, Limits, Request, Response, error_response
from gpu_exporter.http.webconfig import AuthBusy, BasicAuth, CertificateReloader, WebConfig
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
                 auth: BasicAuth | None = None, workers: int = SCRAPE_WORKERS) -> None:
        self.registry = registry
        # prometheus_client's own /metrics application: content negotiation (text,
        # OpenMetrics), gzip, and `name[]` filtering, exactly as the library serves them.
        self.metrics_app = make_wsgi_app(registry)
        # Every answer a scraper asks for by default (text, OpenMetrics 1.0.0, any
        # escaping; no `name[]`): the library's bytes, rendered faster.
        self.text = TextRenderer()
        self.telemetry_path = telemetry_path
        self.auth = auth
        self._workers = ThreadPoolExecutor(max_workers=workers,
                                           thread_name_prefix="http-scrape")

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
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._workers, self._metrics, query,
                                              request.headers, head)
        if path == "/":
            return _text(200, landing_page(self.telemetry_path).encode(), head,
                         content_type="text/html; charset=utf-8")
        if path == "/healthz":
            return _text(200, b"ok\n", head)
        return _text(404, b"404 page not found\n", head)

    async def _denied(self, request: Request, path: str, head: bool) -> Response | None:
        # /healthz stays open so liveness probes and the image's HEALTHCHECK need no
        # password; it tells nothing but "ok".
        if self.auth is None or path == "/healthz":
            return None
        try:
            if await self.auth.check_async(request.headers.get("authorization")):
                return None
        except AuthBusy:
            return _text(503, b"503 too many password checks at once, retry later\n", head,
                         [("Retry-After", "1")])
        # One answer whatever was wrong (user, password, scheme, encoding).
        return _text(401, b"Unauthorized\n", head,
                     [("WWW-Authenticate", 'Basic realm="gpu-exporter"')])

    def _metrics(self, query: str, headers: dict[str, str], head: bool) -> Response:
        accept = accept_known_versions(headers.get("accept", ""))
        gzipped = gzip_wanted(headers.get("accept-encoding", ""))
        render = self._own_rendering(accept) if "name[]" not in parse_qs(query) else None
        if render is not None:
            body = render[0](self.registry)
            out = [("Content-Type", render[1])]
            if gzipped:
                body = gzip.compress(body, compresslevel=GZIP_LEVEL)
                out.append(("Content-Encoding", "gzip"))
            return Response(200, body, out, head_only=head)
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
    auth = BasicAuth(web_config.basic_auth_users) if web_config.auth_required else None
    tls = None
    if web_config.tls is not None:
        tls = CertificateReloader(web_config.tls, lambda msg: log.warning("%s", msg))
    elif web_config.auth_required:
        log.warning("basic auth without TLS: passwords cross the network in clear text; "
                    "add tls_server_config to %s", web_config.source)
    app = App(registry, telemetry_path, auth)
    try:
        return HttpServer(
            (host, port), app, Limits(read_header_timeout=read_header_timeout), tls=tls,
            client_allowed_sans=web_config.tls.client_allowed_sans if web_config.tls else (),
            config_headers=dict(web_config.headers))
    except OSError as exc:
        raise ListenError(f"cannot listen on {listen_address} (--web.listen-address): "
                          f"{exc.strerror or exc}") from exc
