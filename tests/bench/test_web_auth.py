"""What TLS and basic auth cost per request, against plain HTTP, side by side in one run
(real exporter process, real clients, the cheap landing page `/` so the web layer is what
is measured, not the collectors). The "auth, uncached" case sends a wrong password, which
is never cached: every request pays the full bcrypt that the success cache saves."""

from __future__ import annotations

import http.client
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from tests.bench.conftest import Results
from tests.bench.stats import percentile
from tests.helpers import exporter
from tests.web.certs import make_certs
from tests.web.serve import basic, tls_exporter, write_config

ROUNDS = 60
UNCACHED_ROUNDS = 15
# What htpasswd -B and bcrypt.gensalt() use by default: a realistic hash.
BCRYPT_COST = 12


def _timed(fn: Callable[[], int], expect: int) -> float:
    t = time.perf_counter()
    status = fn()
    elapsed = time.perf_counter() - t
    assert status == expect
    return elapsed


@pytest.mark.bench
def test_tls_and_auth_cost(benchmark: Any, results: Results, tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    good = basic("prometheus", "pw")
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=BCRYPT_COST)).decode()
    tls_cfg = write_config(tmp_path, {"tls_server_config": {
        "cert_file": str(certs.server.cert), "key_file": str(certs.server.key)}}, "tls.yml")
    auth_cfg = write_config(tmp_path, {
        "tls_server_config": {"cert_file": str(certs.server.cert),
                              "key_file": str(certs.server.key)},
        "basic_auth_users": {"prometheus": hashed}}, "auth.yml")
    ctx = ssl.create_default_context(cafile=str(certs.ca.cert))

    with exporter() as plain, tls_exporter(tls_cfg, ctx) as tls_port, \
            tls_exporter(auth_cfg, ctx) as auth_port:
        keep_plain = http.client.HTTPConnection("127.0.0.1", plain.port)
        keep_tls = http.client.HTTPSConnection("localhost", tls_port, context=ctx)
        keep_auth = http.client.HTTPSConnection("localhost", auth_port, context=ctx)

        def get(conn: http.client.HTTPConnection, headers: dict[str, str] | None = None,
                close: bool = True) -> int:
            try:
                conn.request("GET", "/", headers=headers or {})
                r = conn.getresponse()
                r.read()
                return r.status
            finally:
                if close:
                    conn.close()

        cases: dict[str, tuple[Callable[[], int], int]] = {
            "plain HTTP, kept-alive connection (floor)":
                (lambda: get(keep_plain, close=False), 200),
            "plain HTTP, new connection":
                (lambda: get(http.client.HTTPConnection("127.0.0.1", plain.port)), 200),
            "TLS, new connection":
                (lambda: get(http.client.HTTPSConnection("localhost", tls_port,
                                                         context=ctx)), 200),
            "TLS, kept-alive connection":
                (lambda: get(keep_tls, close=False), 200),
            "TLS + basic auth, kept-alive, cached":
                (lambda: get(keep_auth, good, close=False), 200),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for fn, expect in cases.values():
            _timed(fn, expect)  # warm: connections, caches
        # Round-robin, so drift on a shared machine hits every case alike.
        for _ in range(ROUNDS):
            for name, (fn, expect) in cases.items():
                times[name].append(_timed(fn, expect))
        # Apart, after the others: a quarter second of bcrypt on the shared cores slows
        # whichever request comes next, which would bill the wrong case.
        uncached = f"TLS + basic auth, kept-alive, uncached (bcrypt cost {BCRYPT_COST})"
        wrong = basic("prometheus", "wrong")
        times[uncached] = [_timed(lambda: get(keep_auth, wrong, close=False), 401)
                           for _ in range(UNCACHED_ROUNDS)]
        benchmark.group = "web: TLS and basic auth"
        benchmark.pedantic(cases["TLS + basic auth, kept-alive, cached"][0], rounds=ROUNDS,
                           iterations=1)
        for conn in (keep_plain, keep_tls, keep_auth):
            conn.close()

    floor = percentile(times["plain HTTP, kept-alive connection (floor)"], 50)
    rows = {}
    for name, ts in times.items():
        rows[name] = {"p50": percentile(ts, 50), "p99": percentile(ts, 99),
                      "ratio_p50": percentile(ts, 50) / floor, "rounds": len(ts)}
        print(f"{name:60s} p50 {rows[name]['p50'] * 1000:7.2f} ms  "
              f"p99 {rows[name]['p99'] * 1000:7.2f} ms  {rows[name]['ratio_p50']:.2f}x")
    results.put("web_auth", "cases", {
        "rows": rows, "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
