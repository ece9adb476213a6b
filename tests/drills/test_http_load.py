"""HTTP drills on the real exporter process: many scrapers at once, and slowloris
clients that trickle header bytes, while normal scrapes go on.

`GPU_EXPORTER_DRILL_SECONDS` shortens the load drill for local iteration; CI runs the
full 60 s the issue asks for.
"""

from __future__ import annotations

import http.client
import os
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import Exporter, eventually, exporter, parse, promtool_check_metrics

LOAD_SECONDS = float(os.environ.get("GPU_EXPORTER_DRILL_SECONDS", "60"))
SCRAPERS = 50
# A scraper's own timeout (Prometheus default scrape_timeout is 10 s).
SCRAPE_TIMEOUT = 10.0
# NVML lanes (gpu_exporter/sources/library/lanes.py) add a worker when a lane stalls, at most one
# per GPU, and keep it: two lane kinds (device values, process lists) on eight GPUs.
LANE_WORKERS = 2 * 8


def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError(f"no Threads: line for pid {pid}")


def sockets_of(pid: int) -> int:
    """The sockets the process holds open (its listener, its clients' connections)."""
    fds = Path(f"/proc/{pid}/fd")
    return sum(1 for fd in fds.iterdir() if _readlink(fd).startswith("socket:"))


def _readlink(fd: Path) -> str:
    try:
        return os.readlink(fd)
    except FileNotFoundError:  # closed while we listed the folder
        return ""


def get(port: int, path: str = "/metrics", timeout: float = SCRAPE_TIMEOUT
        ) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@dataclass
class Tally:
    ok: int = 0
    errors: list[str] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)  # a few, checked in full after
    lock: threading.Lock = field(default_factory=threading.Lock)


def _scraper(port: int, until: float, tally: Tally, keep: bool) -> None:
    while time.monotonic() < until:
        try:
            status, body = get(port)
        except OSError as exc:
            with tally.lock:
                tally.errors.append(f"{type(exc).__name__}: {exc}")
            continue
        with tally.lock:
            if status != 200 or not body.endswith(b"\n") or b"gpu_exporter_build_info" not in body:
                tally.errors.append(f"status {status}, {len(body)} bytes: {body[-200:]!r}")
            else:
                tally.ok += 1
                if keep and len(tally.bodies) < 5:
                    tally.bodies.append(body)


def _device_series(exp: Exporter) -> int:
    return sum(1 for s in parse(exp.scrape()) if s.name == "hw_gpu_up")


def test_fifty_concurrent_scrapers(eight_gpus: Mapping[str, str]) -> None:
    with exporter(env=eight_gpus) as exp:
        reference = exp.scrape()
        gpus = _device_series(exp)
        assert gpus == 8  # the load meets a scrape that reads eight (fake) GPUs
        baseline_threads = threads_of(exp.proc.pid)
        tally = Tally()
        until = time.monotonic() + LOAD_SECONDS
        workers = [
            threading.Thread(target=_scraper, args=(exp.port, until, tally, i % 10 == 0))
            for i in range(SCRAPERS)
        ]
        for w in workers:
            w.start()
        peak_threads = baseline_threads
        while any(w.is_alive() for w in workers):
            peak_threads = max(peak_threads, threads_of(exp.proc.pid))
            workers[0].join(0.2)  # a sample every 0.2 s until the load ends
        for w in workers:
            w.join()

        assert not tally.errors, f"{len(tally.errors)} failed scrapes, first: {tally.errors[:3]}"
        assert tally.ok >= SCRAPERS, tally.ok
        # The load does not make threads pile up: at most two handler threads per
        # scraper (one serving, one still closing the connection its client has already
        # read to the end and replaced), plus the NVML lane workers that the GIL stalls
        # of this load may add, bounded by one per GPU per lane kind.
        assert peak_threads <= baseline_threads + 2 * SCRAPERS + LANE_WORKERS, (
            baseline_threads, peak_threads)
        # Under load every answer is a whole, valid exposition with the same families.
        names = {s.name for s in parse(reference)}
        for body in tally.bodies:
            text = body.decode()
            promtool_check_metrics(text)
            assert {s.name for s in parse(text)} == names
        # Afterwards the exporter is still healthy and back to its idle thread count.
        assert _device_series(exp) == gpus
        idle = baseline_threads + LANE_WORKERS
        settled = eventually(lambda: (n := threads_of(exp.proc.pid)) <= idle and n, 15,
                             f"back to at most {idle} threads ({baseline_threads} at rest)")
        # What stays is a bounded pool, not a leak: more scrapes than the bound allows
        # leave no thread behind once their handlers have closed. (Right after a scrape
        # its handler thread may still be closing the connection; a slow NVML call may
        # add a lane worker, within the bound.)
        for _ in range(LANE_WORKERS + 20):
            exp.scrape()
        eventually(lambda: threads_of(exp.proc.pid) <= idle, 15,
                   f"no thread left behind ({baseline_threads} at rest, {settled} settled)")


def _trickle(port: int, stop: threading.Event, sent: list[int]) -> None:
    """Slowloris: a request whose header never ends, one byte at a time, each byte well
    inside the server's per-read timeout so the connection is never idle long enough to
    be dropped for silence."""
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 10_000
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            for byte in request:
                if stop.is_set():
                    return
                s.sendall(bytes([byte]))
                sent[0] += 1
                stop.wait(0.5)
    except OSError:
        return  # the server may close a slow connection; that is allowed


def test_slowloris_clients_do_not_block_scrapes(eight_gpus: Mapping[str, str]) -> None:
    with exporter(env=eight_gpus) as exp:
        stop = threading.Event()
        sent = [[0] for _ in range(40)]
        slow = [threading.Thread(target=_trickle, args=(exp.port, stop, n)) for n in sent]
        for t in slow:
            t.start()
        try:
            eventually(lambda: all(n[0] >= 2 for n in sent), 30,
                       "every slow client connected and trickling")
            start = [n[0] for n in sent]
            answered = 0

            def scrape_while_they_trickle() -> bool:
                nonlocal answered
                status, body = get(exp.port, timeout=SCRAPE_TIMEOUT)
                assert status == 200 and b"gpu_exporter_build_info" in body
                answered += 1
                # Scrapes go on until every slow client has sent ten more bytes in the
                # meantime: they were really trickling during those scrapes.
                return answered >= 40 and all(
                    n[0] >= s + 10 for n, s in zip(sent, start, strict=True))

            eventually(scrape_while_they_trickle, 40 * SCRAPE_TIMEOUT,
                       "scrapes answered while the slow clients trickle",
                       interval=0.05, retry_on=())
            assert get(exp.port, "/healthz")[0] == 200
        finally:
            stop.set()
            for t in slow:
                t.join(10)
