"""Issue 32's attacks on the HTTP front, against the real exporter on 8 fake H100s over
loopback, each bounded in clients and time: a pipelined burst from 600 connections that
close at once, 600 slow bodies, 1,000 scrapers at once, scrapers hanging up mid-response,
and 40 wrong-password clients on another address against a fresh exporter. Each asserts
that legitimate scrapes keep being answered, and that the exporter's threads and memory
stay within docs/web-front.md's bounds. `GPU_EXPORTER_ATTACK_REPORT=<file>` writes what
each measured as a JSON line (the HTTP front's rows of docs/hostile-input.md).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import re
import resource
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import bcrypt

from tests.drills.test_http_attacks import exporter_with, reset_close, status_kib
from tests.drills.test_http_load import SCRAPE_TIMEOUT, get, threads_of
from tests.drills.test_http_refusals import refusals
from tests.helpers import Exporter, eventually

# What the HTTP front and asyncio say above debug (the start-up warnings are not theirs).
WARN = re.compile(r"level=(warn|warning|error) logger=(asyncio|gpu_exporter\.web) ")
# A scrape worker or two, the bcrypt thread, a web-config reload: never a thread per
# connection (docs/web-front.md, "Limits").
MAX_EXTRA_THREADS = 8


@contextlib.contextmanager
def file_limit(n: int) -> Iterator[None]:
    """A file descriptor limit of `n` for this process and the exporter it starts."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= n, f"RLIMIT_NOFILE hard limit {hard} is below {n}"
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@dataclass
class Paced:
    """Scrapes at a fixed pace, each on a thread of its own so a slow one does not delay
    the next: what a Prometheus at that interval does."""

    answered: list[float] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def run(self, scrape: Callable[[], int], count: int, interval: float = 1.0) -> None:
        lock = threading.Lock()

        def one() -> None:
            started = time.monotonic()
            try:
                status = scrape()
            except OSError as exc:
                with lock:
                    self.failed.append(f"{type(exc).__name__}: {exc}")
                return
            took = time.monotonic() - started
            with lock:
                if status == 200 and took < SCRAPE_TIMEOUT:
                    self.answered.append(took)
                else:
                    self.failed.append(f"status {status} after {took:.1f}s")

        threads = []
        start = time.monotonic()
        for i in range(count):
            time.sleep(max(0.0, start + i * interval - time.monotonic()))  # the pace
            t = threading.Thread(target=one)
            t.start()
            threads.append(t)
        for t in threads:
            t.join(SCRAPE_TIMEOUT + 5)


@dataclass
class Watch:
    """Peak threads and RSS of the exporter while the attack runs (VmHWM reset first)."""

    exp: Exporter
    idle_rss_kib: int = 0
    idle_threads: int = 0
    peak_threads: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Watch:
        pid = self.exp.proc.pid
        self.idle_rss_kib = status_kib(pid, "VmRSS")
        self.idle_threads = self.peak_threads = threads_of(pid)
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        self._thread = threading.Thread(target=self._sample)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self.stop.wait(0.1):
            with contextlib.suppress(OSError, AssertionError):
                self.peak_threads = max(self.peak_threads, threads_of(self.exp.proc.pid))

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self._thread.join()
        self.peak_rss_kib = status_kib(self.exp.proc.pid, "VmHWM")


def report(row: Mapping[str, object]) -> None:
    path = os.environ.get("GPU_EXPORTER_ATTACK_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(dict(row)) + "\n")


def warn_lines(exp: Exporter) -> list[str]:
    return [ln for ln in exp.logs().splitlines() if WARN.search(ln)]


PIPELINED = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"


def test_a_pipelined_burst_that_closes_at_once_keeps_no_scraper_out(
        eight_gpus: Mapping[str, str]) -> None:
    """600 connections each send 1,000 pipelined GET /metrics (21 MB in all) and close at
    once. Was: every buffered request rendered into dead connections, 86 of 86 scrapes
    reset over 90 s, 27,466 warn lines. Now: a scrape answered within 10 s of the burst,
    and at least 27 of 30 scrapes at 1/s (10 s timeout) over the next 30 s."""
    conns, per_conn = 600, 1000
    data = PIPELINED * per_conn
    with file_limit(4096), exporter_with([], eight_gpus) as exp:
        assert get(exp.port)[0] == 200
        warned_before = len(warn_lines(exp))

        def sender(n: int) -> None:
            for _ in range(n):
                with contextlib.suppress(OSError), \
                        socket.create_connection(("127.0.0.1", exp.port), timeout=5) as s:
                    s.sendall(data)

        with Watch(exp) as watch:
            started = time.monotonic()
            senders = [threading.Thread(target=sender, args=(conns // 4,)) for _ in range(4)]
            for t in senders:
                t.start()
            for t in senders:
                t.join(60)
            burst_s = time.monotonic() - started
            first_started = time.monotonic()
            status, _ = get(exp.port, timeout=SCRAPE_TIMEOUT)
            first_s = time.monotonic() - first_started
            paced = Paced()
            paced.run(lambda: get(exp.port, timeout=SCRAPE_TIMEOUT)[0], 30)
        counts = refusals(exp.port)
        warned = len(warn_lines(exp)) - warned_before
        report({"attack": f"pipelined burst: {conns} x {per_conn} GET, closed at once",
                "burst_s": round(burst_s, 1), "first_scrape_s": round(first_s, 2),
                "answered": f"{len(paced.answered)}/30",
                "p50_ms": round(1000 * sorted(paced.answered)[len(paced.answered) // 2])
                if paced.answered else None,
                "warn_lines": warned, "client_gone": counts.get("client_gone"),
                "threads": f"{watch.idle_threads} -> {watch.peak_threads}",
                "rss_mib": f"{watch.idle_rss_kib // 1024} -> {watch.peak_rss_kib // 1024}"})
        assert status == 200 and first_s < SCRAPE_TIMEOUT, (status, first_s)
        assert len(paced.answered) >= 27, paced.failed[:5]
        # No line per dead connection: the connection-limit warning once, at most.
        assert warned <= 2, warn_lines(exp)[-5:]
        assert counts["client_gone"] > 0, counts
        assert watch.peak_threads <= watch.idle_threads + MAX_EXTRA_THREADS
        assert watch.peak_rss_kib <= watch.idle_rss_kib + 64 * 1024, (
            watch.idle_rss_kib, watch.peak_rss_kib)


def slow_bodies(port: int, count: int, stop: threading.Event,
                wrap: Callable[[socket.socket], socket.socket] = lambda s: s,
                head: bytes = b"GET /metrics HTTP/1.1\r\nHost: x\r\n") -> list[int]:
    """`count` connections each promising a 64 KiB body and sending a byte a second;
    one that the server closes is opened again (the attacker keeps up the pressure).
    Returns a one-element list: the connections opened, updated as it goes."""
    opened = [0]

    def open_one() -> socket.socket | None:
        with contextlib.suppress(OSError):
            s = wrap(socket.create_connection(("127.0.0.1", port), timeout=5))
            s.sendall(head + b"Content-Length: 65536\r\n\r\n")
            s.setblocking(False)
            opened[0] += 1
            return s
        return None

    def run() -> None:
        socks = [open_one() for _ in range(count)]
        while not stop.wait(1.0):  # the attack's own pace: a byte a second
            for i, s in enumerate(socks):
                try:
                    if s is None:
                        raise OSError
                    s.send(b"a")
                except (BlockingIOError, ssl.SSLWantWriteError):
                    pass
                except OSError:
                    if s is not None:
                        s.close()
                    socks[i] = open_one() if not stop.is_set() else None
        for s in socks:
            if s is not None:
                s.close()

    threading.Thread(target=run, daemon=True).start()
    return opened


def test_slow_bodies_do_not_hold_the_slots(eight_gpus: Mapping[str, str]) -> None:
    """600 connections sending 64 KiB bodies at a byte a second. Was: 15 of 24 scrapes
    reset (a connection reading a body was busy for 10 s). Now: at least 90 % of scrapes
    at 1/s answered within 10 s."""
    with file_limit(4096), exporter_with([], eight_gpus) as exp:
        stop = threading.Event()
        try:
            with Watch(exp) as watch:
                opened = slow_bodies(exp.port, 600, stop)
                eventually(lambda: opened[0] >= 600, 30, "600 slow bodies under way")
                paced = Paced()
                paced.run(lambda: get(exp.port, timeout=SCRAPE_TIMEOUT)[0], 20)
        finally:
            stop.set()
        report({"attack": "600 slow bodies (64 KiB at 1 B/s)",
                "answered": f"{len(paced.answered)}/20",
                "threads": f"{watch.idle_threads} -> {watch.peak_threads}",
                "rss_mib": f"{watch.idle_rss_kib // 1024} -> {watch.peak_rss_kib // 1024}"})
        assert len(paced.answered) >= 18, paced.failed[:5]
        assert watch.peak_threads <= watch.idle_threads + MAX_EXTRA_THREADS
        assert watch.peak_rss_kib <= 2 * watch.idle_rss_kib


def test_a_thousand_scrapers_at_once_are_each_answered(
        eight_gpus: Mapping[str, str]) -> None:
    """1,000 scrapers connect and ask at once. Was: 11 of 16 reset, the rest at p50 2.3 s.
    Now every one gets an answer within its 10 s timeout: 200 (those that share a
    rendering) or a quick 503 with Retry-After past the 512 connections, never a reset."""
    n = 1000
    with file_limit(4096), exporter_with([], eight_gpus) as exp:
        assert get(exp.port)[0] == 200
        answers: list[tuple[bytes, float]] = []
        failures: list[str] = []
        lock = threading.Lock()
        go = threading.Event()

        def scraper() -> None:
            go.wait(30)
            started = time.monotonic()
            try:
                with socket.create_connection(("127.0.0.1", exp.port),
                                              timeout=SCRAPE_TIMEOUT) as s:
                    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    first = s.recv(12)
                    while s.recv(65536):
                        pass
            except OSError as exc:
                with lock:
                    failures.append(f"{type(exc).__name__}: {exc}")
                return
            with lock:
                answers.append((first[9:12], time.monotonic() - started))

        with Watch(exp) as watch:
            threads = [threading.Thread(target=scraper) for _ in range(n)]
            for t in threads:
                t.start()
            go.set()
            for t in threads:
                t.join(3 * SCRAPE_TIMEOUT)
        ok = sorted(t for status, t in answers if status == b"200")
        busy = [t for status, t in answers if status == b"503"]
        report({"attack": f"{n} scrapers at once", "answered_200": len(ok),
                "answered_503": len(busy), "failed": len(failures),
                "p50_ms": round(1000 * ok[len(ok) // 2]) if ok else None,
                "max_s": round(max(t for _, t in answers), 2) if answers else None,
                "threads": f"{watch.idle_threads} -> {watch.peak_threads}",
                "rss_mib": f"{watch.idle_rss_kib // 1024} -> {watch.peak_rss_kib // 1024}"})
        # The client's own backlog overflow (SYN retries) may fail a few connects on a
        # loaded machine; what connected is answered.
        assert len(failures) <= n // 20, failures[:5]
        assert {status for status, _ in answers} <= {b"200", b"503"}, answers[:5]
        assert len(ok) >= n // 4, (len(ok), len(busy))
        assert max(t for _, t in answers) < SCRAPE_TIMEOUT
        assert watch.peak_threads <= watch.idle_threads + MAX_EXTRA_THREADS


def test_scrapers_hanging_up_mid_response_write_no_warn_line(
        eight_gpus: Mapping[str, str]) -> None:
    """240 scrapers reset the connection once their answer has begun, with more requests
    sent behind the first. Was: asyncio's "socket.send() raised exception." for each
    write past the fifth into the closed connection (issue 32: 419 lines for 240
    hang-ups). Now none: nothing is written to a connection that is gone, and each is
    counted in client_gone."""
    with exporter_with([], eight_gpus) as exp:
        for _ in range(240):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(SCRAPE_TIMEOUT)
            s.connect(("127.0.0.1", exp.port))
            s.sendall(PIPELINED * 10)
            assert s.recv(1) == b"H"
            reset_close(s)
        assert get(exp.port)[0] == 200
        warned = warn_lines(exp)
        gone = refusals(exp.port).get("client_gone")
        report({"attack": "240 hang-ups mid-response (10 requests pipelined each)",
                "warn_lines": len(warned), "client_gone": gone})
        assert warned == [], warned[:5]
        eventually(lambda: refusals(exp.port)["client_gone"] >= 200, 20,
                   "the hang-ups counted")


def test_wrong_passwords_from_another_address_leave_a_fresh_exporter_to_its_scraper(
        tmp_path: Path, eight_gpus: Mapping[str, str]) -> None:
    """40 clients on 127.0.0.2 hammer wrong passwords at a freshly started exporter (no
    scraper vouched for yet). Was: 70 such clients got the real scraper 38 503s in 39, and
    with 40 its first scrape took 9.8 s. Now the scraper on 127.0.0.1 is answered within
    5 s, every time: 127.0.0.2 holds one turn of the bcrypt queue and a budget of
    failures."""
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=12)).decode()
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  prometheus: {hashed}\n")

    def header(pw: str) -> str:
        return "Basic " + base64.b64encode(f"prometheus:{pw}".encode()).decode()

    def scrape(password: str, source: str) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=SCRAPE_TIMEOUT,
                                          source_address=(source, 0))
        try:
            conn.request("GET", "/metrics", headers={"Authorization": header(password)})
            r = conn.getresponse()
            r.read()
            return r.status
        finally:
            conn.close()

    with exporter_with([f"--web.config.file={cfg}"], eight_gpus) as exp:
        port = exp.port
        stop = threading.Event()
        seen: list[int] = []

        def attacker(n: int) -> None:
            for i in range(10_000):
                if stop.is_set():
                    return
                with contextlib.suppress(OSError):
                    seen.append(scrape(f"wrong-{n}-{i}", "127.0.0.2"))

        attackers = [threading.Thread(target=attacker, args=(n,)) for n in range(40)]
        for a in attackers:
            a.start()
        try:
            eventually(lambda: len(seen) >= 40, 30, "the attackers got answers")
            started = time.monotonic()
            status = scrape("right", "127.0.0.1")
            first_s = time.monotonic() - started
            paced = Paced()
            paced.run(lambda: scrape("right", "127.0.0.1"), 10)
        finally:
            stop.set()
            for a in attackers:
                a.join(SCRAPE_TIMEOUT + 5)
        report({"attack": "40 wrong-password clients on 127.0.0.2, cost 12, fresh start",
                "first_scrape_s": round(first_s, 2),
                "answered": f"{len(paced.answered)}/10",
                "attackers": {str(k): seen.count(k) for k in sorted(set(seen))}})
        assert status == 200 and first_s < 5, (status, first_s)
        assert len(paced.answered) == 10, paced.failed
        assert set(seen) <= {401, 429, 503} and 401 in seen, set(seen)
