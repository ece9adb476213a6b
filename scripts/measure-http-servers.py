#!/usr/bin/env python3
"""Measure candidate HTTP servers against the attack cases of issue 21 (docs/web-front.md,
"Choosing the server: measured"), over loopback.

    python3 -m venv /tmp/candidates && /tmp/candidates/bin/pip install cheroot uvicorn aiohttp
    /tmp/candidates/bin/python scripts/measure-http-servers.py cheroot uvicorn aiohttp gpu-exporter

`gpu-exporter` is this checkout's exporter (.venv, no devices); with OLD=<dir> on the
environment, the `gpu_exporter` package in <dir> (e.g. an older commit checked out there
with `git --work-tree=<dir> checkout <commit> -- gpu_exporter`, then `git reset`). Prints
one JSON line per server. Each candidate serves a 100 KB /metrics and /healthz with the
limits it offers (16 KiB head, 10 s timeouts, bounded workers or connections).
"""

import contextlib
import http.client
import json
import os
import re
import resource
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOGS = Path(os.environ.get("LOGS", "/tmp"))
BODY = b"# HELP x y\n" + b'metric_name_here{label="value"} 1\n' * 3000


def serve(which: str, port: int) -> None:
    if which == "cheroot":
        from cheroot import wsgi

        def app(environ, start_response):
            path = environ["PATH_INFO"]
            body = BODY if path == "/metrics" else b"ok\n" if path == "/healthz" else b"404\n"
            start_response("200 OK" if path in ("/metrics", "/healthz") else "404 Not Found",
                           [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
            return [body]

        server = wsgi.Server(("127.0.0.1", port), app, numthreads=10, max=10, timeout=10,
                             request_queue_size=128, accepted_queue_size=64)
        server.max_request_header_size = 16384
        server.start()
    elif which == "uvicorn":
        import uvicorn

        async def app(scope, receive, send):
            if scope["type"] != "http":
                return
            path = scope["path"]
            body = BODY if path == "/metrics" else b"ok\n" if path == "/healthz" else b"404\n"
            await send({"type": "http.response.start",
                        "status": 200 if path in ("/metrics", "/healthz") else 404,
                        "headers": [(b"content-type", b"text/plain"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        uvicorn.run(app, host="127.0.0.1", port=port, http="h11", loop="asyncio",
                    log_level="warning", h11_max_incomplete_event_size=16384,
                    limit_concurrency=512, timeout_keep_alive=10, server_header=False)
    elif which == "aiohttp":
        from aiohttp import web

        async def metrics(request):
            return web.Response(body=BODY, content_type="text/plain")

        async def healthz(request):
            return web.Response(body=b"ok\n", content_type="text/plain")

        app = web.Application()
        app.add_routes([web.get("/metrics", metrics), web.get("/healthz", healthz)])
        web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None,
                    keepalive_timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port, path="/metrics", timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read(), r.getheaders()
    finally:
        c.close()


def start(which, nofile=None):
    port = free_port()

    def limit():
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    env = dict(os.environ)
    if which == "gpu-exporter":
        cmd = [str(REPO / ".venv/bin/gpu-exporter"), f"--web.listen-address=127.0.0.1:{port}"]
        env.update(LD_LIBRARY_PATH="/nonexistent", GPU_EXPORTER_PATH_SYSFS="/nonexistent")
        if os.environ.get("OLD"):
            env["PYTHONPATH"] = os.environ["OLD"]
    else:
        cmd = [sys.executable, __file__, "--serve", which, str(port)]
    with open(LOGS / f"http-servers-{which}.log", "ab") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=log, preexec_fn=limit, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if get(port, "/healthz", timeout=2)[0] == 200:
                return p, port
        time.sleep(0.05)
    raise SystemExit(f"{which} did not start")


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def raw(port, data, timeout=5):
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                out += chunk
    return out


def statuses(data):
    return " ".join(x.decode() for x in re.findall(rb"^HTTP/1\.[01] (\d+)", data, re.M))


def slowest_scrape(port, n=10):
    """Seconds of the slowest of n scrapes (inf: one failed), 30 s at most in all."""
    worst, deadline = 0.0, time.monotonic() + 30
    for _ in range(n):
        if time.monotonic() > deadline:
            break
        t = time.monotonic()
        try:
            ok = get(port)[0] == 200
        except OSError:
            ok = False
        worst = max(worst, time.monotonic() - t if ok else float("inf"))
        time.sleep(0.2)
    return round(worst, 3)


def reset_close(s):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def connect_many(port, count, seconds):
    held, deadline = [], time.monotonic() + seconds
    for _ in range(count):
        if time.monotonic() > deadline:
            break
        with contextlib.suppress(OSError):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=1))
    return held


def run(which):
    res = {"server": which}
    p, port = start(which)
    pid = p.pid
    try:
        get(port)
        idle_rss = status_kib(pid, "VmRSS")
        res["idle"] = f"{idle_rss // 1024} MiB, {status_kib(pid, 'Threads')} threads"
        # Head bomb: 10 clients, 99 header lines of 60 KB, no end of head.
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        head = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + (b"X-Pad: " + b"a" * 60000 + b"\r\n") * 99

        def bomb():
            with contextlib.suppress(OSError), \
                    socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(head)
                s.recv(100)

        bombers = [threading.Thread(target=bomb) for _ in range(10)]
        for t in bombers:
            t.start()
        time.sleep(1.0)
        res["head bomb peak RSS MiB"] = f"{idle_rss // 1024} -> {status_kib(pid, 'VmHWM') // 1024}"
        for t in bombers:
            t.join(15)
        # A body holding a request.
        inner = b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
        res["body as request"] = statuses(raw(
            port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(inner)
            + inner + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
        res["HTTP/1.1 without Host"] = statuses(raw(port, b"GET /healthz HTTP/1.1\r\n\r\n"))
        headers = {k.lower(): v for k, v in get(port, "/nope")[2]}
        res["Server"] = headers.get("server", "(none)")
        # Slowloris: 20 clients trickle a header byte every 0.2 s for 12 s.
        stop, cut = threading.Event(), []

        def slow():
            with contextlib.suppress(OSError), \
                    socket.create_connection(("127.0.0.1", port), timeout=15) as s:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                while not stop.wait(0.2):
                    s.sendall(b"a")
                return
            cut.append(1)

        slow_clients = [threading.Thread(target=slow) for _ in range(20)]
        for t in slow_clients:
            t.start()
        time.sleep(0.5)
        res["slowloris: scrape max s"] = slowest_scrape(port)
        res["slowloris: threads"] = status_kib(pid, "Threads")
        time.sleep(9.5)
        stop.set()
        for t in slow_clients:
            t.join(20)
        res["slowloris: cut off within 12 s"] = len(cut)
        # 1,000 idle connections.
        held = connect_many(port, 1000, 20)
        res["1000 idle: connected"] = len(held)
        time.sleep(0.5)
        res["1000 idle: threads"] = status_kib(pid, "Threads")
        res["1000 idle: scrape max s"] = slowest_scrape(port, 5)
        res["1000 idle: RSS MiB"] = status_kib(pid, "VmRSS") // 1024
        for s in held:
            s.close()
        # Partial request lines then a reset; resets mid-response.
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /metr")
            reset_close(s)
        for _ in range(3):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            s.recv(1)
            reset_close(s)
        time.sleep(1)
        log = (LOGS / f"http-servers-{which}.log").read_text(errors="replace")
        res["tracebacks in log"] = log.count("Traceback")
    finally:
        p.terminate()
        p.wait(10)
    # 178 connections against a file descriptor limit of 128.
    p, port = start(which, nofile=128)
    try:
        held = connect_many(port, 178, 15)
        time.sleep(1)
        c0, t0 = cpu(p.pid), time.monotonic()
        time.sleep(2)
        res["at fd limit: CPU of a core"] = f"{(cpu(p.pid) - c0) / (time.monotonic() - t0):.0%}"
        for s in held:
            s.close()
    finally:
        p.terminate()
        p.wait(10)
    return res


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]))
        sys.exit(0)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    for which in sys.argv[1:]:
        (LOGS / f"http-servers-{which}.log").write_text("")
        print(json.dumps(run(which)), flush=True)
