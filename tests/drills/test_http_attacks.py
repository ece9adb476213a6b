"""The HTTP front under attack, on the real exporter process over loopback: each case of
issue 21 (and the client gone mid-response of issue 20) with a bounded number of clients
and a bounded time. Under each attack legitimate scrapes keep being answered within the
scrape timeout, and the exporter's threads, file descriptors and peak memory are taken
(`GPU_EXPORTER_ATTACK_REPORT=<file>` writes them as JSON lines: the table in
docs/web-front.md).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import resource
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import bcrypt
import pytest

from tests.drills.test_http_load import SCRAPE_TIMEOUT, get, threads_of
from tests.helpers import (
    EXPORTER,
    Exporter,
    eventually,
    free_port,
    stop_process,
    wait_started,
)

# Every line the exporter writes is a logfmt record: a traceback printed past the logging
# set-up breaks that.
LOGFMT = re.compile(r"ts=\S+ level=\w+ logger=\S+ msg=")


def fds_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {key} for pid {pid}")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Measure:
    """What an attack did to the exporter, and how legitimate scrapes fared meanwhile."""

    attack: str
    idle_rss_kib: int = 0
    idle_threads: int = 0
    idle_fds: int = 0
    peak_rss_kib: int = 0
    peak_threads: int = 0
    peak_fds: int = 0
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def row(self) -> dict[str, object]:
        lat = sorted(self.latencies)
        return {
            "attack": self.attack,
            "scrapes": len(lat), "failed": len(self.failures),
            "scrape_p50_ms": round(1000 * lat[len(lat) // 2], 1) if lat else None,
            "scrape_max_ms": round(1000 * lat[-1], 1) if lat else None,
            "threads": f"{self.idle_threads} -> {self.peak_threads}",
            "fds": f"{self.idle_fds} -> {self.peak_fds}",
            "rss_mib": f"{self.idle_rss_kib / 1024:.0f} -> {self.peak_rss_kib / 1024:.0f}",
        }


@contextlib.contextmanager
def under_attack(exp: Exporter, name: str, scrape: Callable[[], int] | None = None,
                 scrapes: int = 10) -> Iterator[Measure]:
    """Measure the exporter while the body of the `with` attacks it; legitimate scrapes
    (`scrapes` of them, one after the other) run alongside. On exit: every scrape was
    answered 200 within the scrape timeout and the peak RSS stayed within 2x idle."""
    pid = exp.proc.pid
    do_scrape = scrape or (lambda: get(exp.port, timeout=SCRAPE_TIMEOUT)[0])
    assert do_scrape() == 200  # warm: the first scrape's allocations are done
    m = Measure(name, idle_rss_kib=status_kib(pid, "VmRSS"), idle_threads=threads_of(pid),
                idle_fds=fds_of(pid))
    # Reset the peak RSS (VmHWM) to the present: what follows is the attack's.
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError, AssertionError):
                m.peak_threads = max(m.peak_threads, threads_of(pid))
                m.peak_fds = max(m.peak_fds, fds_of(pid))
            stop.wait(0.05)

    def legit() -> None:
        for _ in range(scrapes):
            started = time.monotonic()
            try:
                status = do_scrape()
            except OSError as exc:
                m.failures.append(f"{type(exc).__name__}: {exc}")
                continue
            if status != 200:
                m.failures.append(f"status {status}")
            else:
                m.latencies.append(time.monotonic() - started)
            if stop.wait(0.2):
                return

    sampler = threading.Thread(target=sample)
    sampler.start()
    scraper = threading.Thread(target=legit)
    try:
        yield m
        # The attack is in place: the scrapes meet it.
        scraper.start()
        scraper.join(scrapes * (SCRAPE_TIMEOUT + 1))
    finally:
        stop.set()
        sampler.join()
        if scraper.is_alive():
            scraper.join(SCRAPE_TIMEOUT + 1)
    m.peak_rss_kib = status_kib(pid, "VmHWM")
    report = os.environ.get("GPU_EXPORTER_ATTACK_REPORT")
    if report:
        with open(report, "a") as f:
            f.write(json.dumps(m.row()) + "\n")
    assert not m.failures, f"{name}: legitimate scrapes failed: {m.failures[:3]}"
    assert len(m.latencies) == scrapes, (name, m.latencies)
    assert max(m.latencies) < SCRAPE_TIMEOUT, (name, m.latencies)
    assert m.peak_rss_kib <= 2 * m.idle_rss_kib, (name, m.row())


def logfmt_only(exp: Exporter) -> None:
    bad = [line for line in exp.logs().splitlines() if not LOGFMT.match(line)]
    assert not bad, "lines outside the logging set-up:\n" + "\n".join(bad[:30])


@contextlib.contextmanager
def exporter_with(args: Sequence[str], env: Mapping[str, str],
                  nofile: int | None = None) -> Iterator[Exporter]:
    """tests.helpers.exporter, with a file descriptor limit of its own if asked."""
    port = free_port()

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "exporter.log"
        with open(log, "wb") as logf:
            proc = subprocess.Popen(
                [EXPORTER, f"--web.listen-address=127.0.0.1:{port}", *args],
                env={**os.environ, **env}, stdout=logf, stderr=subprocess.STDOUT,
                preexec_fn=limit)
        exp = Exporter(proc, port, log)
        try:
            wait_started(proc, lambda: exp.get("/healthz", timeout=2)[0] == 200,
                         exp.logs, "exporter", 30)
            yield exp
        finally:
            stop_process(proc)


def raw_exchange(port: int, data: bytes, timeout: float = 10) -> bytes:
    """Send bytes as they are and read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def statuses(response: bytes) -> list[str]:
    return re.findall(rb"^HTTP/1\.[01] (\d{3})", response, re.M)  # type: ignore[return-value]


def reset_close(s: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer gets a reset, not an orderly end."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


# --- the attacks


def test_head_bomb_is_cut_off_while_reading(eight_gpus: Mapping[str, str]) -> None:
    """99 header lines of 60 KB with no end of head: the 16 KiB limit holds while the
    server reads (was: the whole head buffered first, 92 MB per connection)."""
    line = b"X-Pad: " + b"a" * 60_000 + b"\r\n"
    head = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + line * 99
    answers: list[bytes] = []

    stop = threading.Event()

    def bomb(port: int) -> None:
        for _ in range(50):  # one after the other, until the scrapes are done
            if stop.is_set():
                return
            with socket.create_connection(("127.0.0.1", port), timeout=SCRAPE_TIMEOUT) as s:
                with contextlib.suppress(OSError):
                    s.sendall(head)
                with contextlib.suppress(OSError):
                    answers.append(s.recv(4096))

    with exporter_with([], eight_gpus) as exp:
        bombers = [threading.Thread(target=bomb, args=(exp.port,)) for _ in range(10)]
        with under_attack(exp, "head bomb: 10 clients, 99 lines of 60 KB"):
            for b in bombers:
                b.start()
        stop.set()
        for b in bombers:
            b.join(SCRAPE_TIMEOUT * 2)
        # The server answered (431) or closed; it never waited for the end of the head.
        assert answers and all(a == b"" or a.startswith(b"HTTP/1.1 431 ")
                               for a in answers), answers[:5]
        logfmt_only(exp)


def test_head_bomb_over_tls_with_basic_auth(tmp_path: Path) -> None:
    """The same bomb through TLS to a password-protected exporter: the head limit holds
    before authentication (only client certificates stopped it before)."""
    import ssl

    from tests.web.certs import make_certs
    from tests.web.serve import tls_exporter, write_config

    certs = make_certs(tmp_path)
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
    cfg = write_config(tmp_path, {
        "tls_server_config": {"cert_file": str(certs.server.cert),
                              "key_file": str(certs.server.key)},
        "basic_auth_users": {"prometheus": hashed}})
    ctx = ssl.create_default_context(cafile=str(certs.ca.cert))
    head = (b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
            + (b"X-Pad: " + b"a" * 60_000 + b"\r\n") * 99)
    answers: list[bytes] = []

    def bomb(port: int) -> None:
        with contextlib.suppress(OSError), \
                socket.create_connection(("127.0.0.1", port), timeout=SCRAPE_TIMEOUT) as raw, \
                ctx.wrap_socket(raw, server_hostname="localhost") as s:
            with contextlib.suppress(OSError):
                s.sendall(head)
            answers.append(s.recv(4096))

    pid: list[int] = []
    with tls_exporter(cfg, ctx, pid=pid) as port:
        idle = status_kib(pid[0], "VmRSS")
        Path(f"/proc/{pid[0]}/clear_refs").write_text("5")
        bombers = [threading.Thread(target=bomb, args=(port,)) for _ in range(10)]
        for b in bombers:
            b.start()
        for b in bombers:
            b.join(SCRAPE_TIMEOUT * 2)
        peak = status_kib(pid[0], "VmHWM")
        assert peak <= 2 * idle, (idle, peak)
        assert answers and all(a == b"" or a.startswith(b"HTTP/1.1 431 ")
                               for a in answers), answers[:3]


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_body_is_never_read_as_a_request(framing: str) -> None:
    inner = b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
    if framing == "content-length":
        first = (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(inner)
                 + inner)
    else:
        first = (b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                 + b"%x\r\n" % len(inner) + inner + b"\r\n0\r\n\r\n")
    last = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    with exporter_with([], NO_DEVICES) as exp:
        got = raw_exchange(exp.port, first + last)
        # Two requests, two answers: the body of the first is not a third request.
        assert statuses(got) == [b"200", b"200"], got
        # Both framings at once is refused, not guessed.
        both = (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" % len(inner) + inner)
        assert statuses(raw_exchange(exp.port, both)) == [b"400"]


def test_a_large_body_is_refused_and_the_answer_still_arrives() -> None:
    with exporter_with([], NO_DEVICES) as exp:
        body = b"x" * (1 << 20)  # past the 64 KiB drained: refused, not read to the end
        got = raw_exchange(exp.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        # The client reads the 413 (a lingering close), not a reset.
        assert statuses(got) == [b"413"], got[:200]
        small = b"y" * 1000
        got = raw_exchange(exp.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                                     b"Content-Length: %d\r\n\r\n" % len(small) + small
                           + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert statuses(got) == [b"200", b"200"], got
        assert statuses(raw_exchange(exp.port, b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n")
                        ) == [b"505"]


def test_http11_needs_a_host() -> None:
    with exporter_with([], NO_DEVICES) as exp:
        assert statuses(raw_exchange(exp.port, b"GET /healthz HTTP/1.1\r\n\r\n")) == [b"400"]
        # HTTP/1.0 has no Host requirement.
        assert statuses(raw_exchange(exp.port, b"GET /healthz HTTP/1.0\r\n\r\n")) == [b"200"]


def test_no_version_in_any_answer(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=4)).decode()
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  prometheus: {hashed}\n")
    with exporter_with([f"--web.config.file={cfg}"], NO_DEVICES) as exp:
        for path in ("/metrics", "/healthz", "/nope"):
            got = raw_exchange(exp.port, f"GET {path} HTTP/1.1\r\nHost: x\r\n"
                                         "Connection: close\r\n\r\n".encode())
            head = got.partition(b"\r\n\r\n")[0].decode("latin-1")
            server = [ln for ln in head.split("\r\n") if ln.lower().startswith("server:")]
            assert not any(re.search(r"\d|python", s, re.I) for s in server), head


def test_a_head_cut_off_at_the_deadline_is_never_executed(
        eight_gpus: Mapping[str, str]) -> None:
    """Slowloris: the head trickles past --web.read-header-timeout; the server closes the
    connection and does not then run what it had (was: a full GET and a traceback)."""
    clients = 20
    stop = threading.Event()
    closed: list[float] = []

    def trickle(port: int, n: int) -> None:
        for round_ in range(10):  # a new slow head each time the last one is cut off
            if stop.is_set():
                return
            request = f"GET /metrics?slowloris-{n}-{round_} HTTP/1.1\r\nHost: x\r\n".encode()
            started = time.monotonic()
            with socket.create_connection(("127.0.0.1", port), timeout=SCRAPE_TIMEOUT) as s:
                s.sendall(request + b"X-Slow: ")
                for _ in range(100):  # a byte every 0.1 s, for 10 s at most
                    try:
                        s.sendall(b"a")
                        if s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                            break
                    except BlockingIOError:
                        pass
                    except OSError:
                        break
                    stop.wait(0.1)  # the attack's own pace, not a wait for the server
                closed.append(time.monotonic() - started)

    args = ["--web.read-header-timeout=1", "--log.level=debug"]
    with exporter_with(args, eight_gpus) as exp:
        slow = [threading.Thread(target=trickle, args=(exp.port, n)) for n in range(clients)]
        with under_attack(exp, f"slowloris: {clients} heads trickling, cut at 1 s"):
            for t in slow:
                t.start()
        stop.set()
        for t in slow:
            t.join(20)
        assert closed and all(t < 5 for t in closed), closed
        # The scrapes above prove the server is serving; the cut heads left nothing.
        assert "slowloris" not in exp.logs(), exp.logs()[-3000:]
        logfmt_only(exp)


def test_idle_connections_hold_no_threads(eight_gpus: Mapping[str, str]) -> None:
    """1,000 connections that send nothing: bounded threads and memory, scrapes answered
    (was: one thread per connection, 1,440 idle connections made 1,452 threads)."""
    idle = 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 4 * idle)
    assert want >= 2 * idle + 200, f"RLIMIT_NOFILE hard limit {hard} is too low"
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # the exporter inherits it
    try:
        with exporter_with([], eight_gpus) as exp:
            held: list[socket.socket] = []
            try:
                with under_attack(exp, f"{idle} idle connections") as m:
                    for _ in range(idle):
                        with contextlib.suppress(OSError):
                            held.append(socket.create_connection(("127.0.0.1", exp.port),
                                                                 timeout=5))
                    assert len(held) >= 0.9 * idle, len(held)
            finally:
                for s in held:
                    s.close()
            # A scrape worker or two may start; never a thread per connection.
            assert m.peak_threads <= m.idle_threads + 8, m.row()
            # Past the cap (512) the oldest idle connections were closed, and said so once.
            assert exp.logs().count("connections open, the most the server keeps") == 1
            logfmt_only(exp)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_file_descriptor_limit_does_not_spin_the_accept_loop(
        eight_gpus: Mapping[str, str]) -> None:
    nofile = 128
    with exporter_with(["--web.read-header-timeout=30"], eight_gpus, nofile=nofile) as exp:
        pid = exp.proc.pid
        held = []
        for _ in range(nofile + 50):  # more than the exporter can accept
            with contextlib.suppress(OSError):
                held.append(socket.create_connection(("127.0.0.1", exp.port), timeout=5))
        try:
            eventually(lambda: fds_of(pid) >= nofile - 2, 10,
                       "the exporter reached its fd limit")
            before, started = cpu_seconds(pid), time.monotonic()
            time.sleep(2)  # a measuring window: the CPU the exporter burns while at the limit
            used = (cpu_seconds(pid) - before) / (time.monotonic() - started)
            assert used < 0.25, f"the exporter used {used:.0%} of a core at the fd limit"
        finally:
            for s in held:
                s.close()
        assert get(exp.port)[0] == 200
        assert "file descriptor limit" in exp.logs()
        logfmt_only(exp)


def test_a_client_gone_mid_response_is_a_debug_line(eight_gpus: Mapping[str, str]) -> None:
    """Issue 20: clients that reset the connection once the answer has begun are debug
    lines, never a traceback (was: socketserver's handle_error on stderr)."""
    gone = re.compile(r"level=debug .*127\.0\.0\.1.*(went away mid-response|"
                      r"ended: ConnectionResetError)")
    with exporter_with(["--log.level=debug"], eight_gpus) as exp:
        for _ in range(5):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(SCRAPE_TIMEOUT)
            s.connect(("127.0.0.1", exp.port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(1) == b"H"  # the answer has begun
            reset_close(s)
        eventually(lambda: len(gone.findall(exp.logs())) >= 5, SCRAPE_TIMEOUT,
                   "five debug lines of clients gone")
        assert len(gone.findall(exp.logs())) == 5, exp.logs()[-3000:]
        assert get(exp.port)[0] == 200
        logfmt_only(exp)


def test_a_reset_while_the_body_is_written_is_a_debug_line(
        caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    """The same, made certain to meet the write: the front in this process, answering a
    body (8 MiB) larger than any socket buffer to a client that resets after one byte."""
    from gpu_exporter.http.server import HttpServer, Limits, Request, Response

    body = b"x" * (8 << 20)

    async def big(request: Request) -> Response:
        return Response(200, body, [("Content-Type", "text/plain")])

    server = HttpServer(("127.0.0.1", 0), big, Limits())
    loop = threading.Thread(target=server.serve_forever)
    loop.start()
    caplog.set_level("DEBUG", logger="gpu_exporter.web")
    try:
        for _ in range(3):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(SCRAPE_TIMEOUT)
            s.connect(server.server_address[:2])
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(1) == b"H"
            reset_close(s)
        eventually(lambda: sum("went away mid-response" in r.getMessage()
                               for r in caplog.records) >= 3, SCRAPE_TIMEOUT,
                   "three debug lines of clients gone mid-response")
    finally:
        server.shutdown()
        server.server_close()
        loop.join(10)
    gone = [r for r in caplog.records if "went away mid-response" in r.getMessage()]
    assert len(gone) == 3 and all(r.levelname == "DEBUG" for r in gone), caplog.text
    assert not [r for r in caplog.records if r.levelno > 10 or r.exc_info], caplog.text
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("close", ["end", "reset"])
def test_a_partial_request_line_is_not_a_traceback(close: str) -> None:
    with exporter_with(["--log.level=debug"], NO_DEVICES) as exp:
        for _ in range(5):
            s = socket.create_connection(("127.0.0.1", exp.port), timeout=SCRAPE_TIMEOUT)
            s.sendall(b"GET /metr")
            if close == "reset":
                reset_close(s)
            else:
                s.close()
        # Each of them is in the (debug) log, naming the client, once the server has
        # dealt with it: then the log holds whatever they caused.
        def five_logged() -> bool:
            assert len(peer_lines(exp)) >= 5, exp.logs()
            return True

        eventually(five_logged, SCRAPE_TIMEOUT, "five lines about the clients in the log")
        assert get(exp.port, "/healthz")[0] == 200
        logfmt_only(exp)


def peer_lines(exp: Exporter) -> list[str]:
    """Log lines about a client's connection other than a served request."""
    return [line for line in exp.logs().splitlines()
            if "127.0.0.1" in line and "listening on" not in line and '"GET ' not in line]


def test_wrong_passwords_do_not_starve_scrapes(tmp_path: Path,
                                               eight_gpus: Mapping[str, str]) -> None:
    """Forty clients sending wrong passwords at cost 10, and a scraper with the right one."""
    password = "right"
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  prometheus: {hashed}\n")

    def header(user: str, pw: str) -> str:
        return "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()

    def scrape_with(port: int, auth: str) -> int:
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=SCRAPE_TIMEOUT)
        try:
            conn.request("GET", "/metrics", headers={"Authorization": auth})
            r = conn.getresponse()
            r.read()
            return r.status
        finally:
            conn.close()

    good = header("prometheus", password)
    with exporter_with([f"--web.config.file={cfg}"], eight_gpus) as exp:
        stop = threading.Event()
        refused: list[int] = []

        def attacker(n: int) -> None:
            for i in range(200):
                if stop.is_set():
                    return
                with contextlib.suppress(OSError):
                    refused.append(scrape_with(exp.port, header("prometheus", f"w{n}-{i}")))

        def legit() -> int:
            return scrape_with(exp.port, good)

        assert legit() == 200
        attackers = [threading.Thread(target=attacker, args=(n,)) for n in range(40)]
        with under_attack(exp, "40 clients with wrong passwords (cost 10)", legit):
            for a in attackers:
                a.start()
        stop.set()
        for a in attackers:
            a.join(SCRAPE_TIMEOUT + 5)
        # 429: the attackers' address spent its budget of failures (no bcrypt at all).
        assert refused and set(refused) <= {401, 429, 503}, set(refused)
        logfmt_only(exp)


NO_DEVICES = {"LD_LIBRARY_PATH": "/nonexistent", "GPU_EXPORTER_PATH_SYSFS": "/nonexistent"}
