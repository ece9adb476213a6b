"""The Accept headers tests/scrapers.py pins (and the render tests answer) are what the
real scrapers CI installs send: Debian's Prometheus (2.42: the 2.35-2.48 header) and
vmagent scrape a loopback target that records each request's headers. Prometheus 3's
headers are pinned from its sources (tests/scrapers.py), no Prometheus 3 being installed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.helpers import eventually
from tests.scrapers import PROMETHEUS_2, VMAGENT
from tests.servers import prometheus, scrape_config, vmagent


class _Recorder(BaseHTTPRequestHandler):
    seen: list[dict[str, str]]

    def do_GET(self) -> None:
        self.seen.append({k.lower(): v for k, v in self.headers.items()})
        body = b"# TYPE up_probe gauge\nup_probe 1\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # vmagent's remote write: taken, dropped
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def recorder() -> Iterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []
    handler = type("Handler", (_Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _first_scrape(seen: list[dict[str, str]]) -> dict[str, str]:
    scrapes = [h for h in seen if "accept" in h]
    assert scrapes, seen
    return scrapes[0]


def test_prometheus_sends_the_pinned_accept_header() -> None:
    with recorder() as (target, seen), prometheus([scrape_config("probe", [target])]):
        headers = eventually(lambda: _first_scrape(seen), 30, "a scrape by Prometheus")
    assert headers["accept"] == PROMETHEUS_2.accept
    assert "gzip" in headers["accept-encoding"]


def test_vmagent_sends_the_pinned_accept_header() -> None:
    with recorder() as (target, seen), vmagent([scrape_config("probe", [target])],
                                               f"http://{target}/api/v1/write"):
        headers = eventually(lambda: _first_scrape(seen), 30, "a scrape by vmagent")
    assert headers["accept"] == VMAGENT.accept
    assert "gzip" in headers["accept-encoding"]
