"""The 2-GPU node with host metrics at 1 Hz (issue #26): CPU per second of exporter
processes, each a real `gpu-exporter` with its default collectors on the same fake node
(2 fake H100s, 1 GPU process), scraped once a second with Prometheus 2's Accept header.

Several source trees side by side in one run (a tree from before a change, `git archive
<commit> | tar -x -C DIR`, and this checkout): each second every exporter is scraped
once, in an order that alternates, so the machine's other load falls on all of them
alike. Reported per exporter: CPU per second (user + system of the whole process from
`/proc/<pid>/stat`, in 10 ms ticks; and the sum of its threads' schedstat, exact),
wake-ups (voluntary context switches of all its threads) per second, resident memory
at the end, and the CPU of its busiest threads.

Usage: .venv/bin/python -m tests.bench.host_node [--seconds 60] [--gzip] [TREE ...]
(no TREE: this checkout alone)
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.bench import fleet, procstat
from tests.fake_nvml import scenario as fake
from tests.helpers import REPO, free_port, stop_process, wait_started
from tests.scrapers import PROMETHEUS_2

# What Prometheus 2 sends: OpenMetrics 1.0.0 first.
PROMETHEUS_ACCEPT = PROMETHEUS_2.accept


def _tasks(pid: int) -> dict[int, tuple[float, int]]:
    """(CPU seconds, voluntary context switches) of each thread of `pid`; the CPU time
    from schedstat (nanoseconds, where /proc/<pid>/stat counts 10 ms ticks)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                on_cpu_ns = int(f.read().split()[0])
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                switches = next(int(line.split()[1]) for line in f
                                 if line.startswith("voluntary_ctxt_switches:"))
        except (FileNotFoundError, ProcessLookupError):
            continue
        out[int(tid)] = (on_cpu_ns / 1e9, switches)
    return out


class Running:
    def __init__(self, tree: Path, scenario: Path, lib: Path, log: Path,
                 gzipped: bool) -> None:
        self.tree = tree
        self.headers = {"Accept": PROMETHEUS_ACCEPT}
        if gzipped:  # Prometheus asks for it unless the scrape config turns it off
            self.headers["Accept-Encoding"] = "gzip"
        self.port = free_port()
        self.log = log
        env = {**os.environ, **fake.env(lib, scenario), "PYTHONPATH": str(tree)}
        with open(log, "wb") as logf:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gpu_exporter",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                cwd=tree, env=env, stdout=logf, stderr=subprocess.STDOUT)
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        wait_started(self.proc, self._healthy, log.read_text, str(tree), 60)

    def _healthy(self) -> bool:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            c.request("GET", "/healthz")
            return c.getresponse().status == 200
        finally:
            c.close()

    def scrape(self) -> bytes:
        self.conn.request("GET", "/metrics", headers=self.headers)
        r = self.conn.getresponse()
        body = r.read()
        if r.getheader("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        assert r.status == 200 and b"hw_gpu_up" in body, (r.status, body[:300])
        return body


@dataclass(frozen=True)
class Measured:
    tree: Path
    cpu_ms_per_second: float  # the whole process, /proc/<pid>/stat (10 ms ticks)
    thread_cpu_ms_per_second: float  # its live threads' schedstat (nanoseconds)
    wakeups_per_second: float
    series: int
    rss_bytes: int
    threads: int
    busiest: list[tuple[float, float]]  # (ms/s, wake-ups/s) of the 4 busiest threads


def measure(trees: list[Path], seconds: int, gzipped: bool | list[bool] = False
            ) -> list[Measured]:
    """Each tree's exporter on the same fake node, scraped once a second for `seconds`
    (`gzipped`: asking for gzip, as Prometheus does by default; one for all, or one a
    tree)."""
    wants = gzipped if isinstance(gzipped, list) else [gzipped] * len(trees)
    with tempfile.TemporaryDirectory() as tmp:
        scenario = fleet.scenario(2, 1).write(Path(tmp) / "node.scenario")
        lib = fake.build()
        running = [Running(t.resolve(), scenario, lib, Path(tmp) / f"{i}.log", g)
                   for i, (t, g) in enumerate(zip(trees, wants, strict=True))]
        try:
            for r in running:  # first scrape: start-up work, caches
                r.scrape()
            time.sleep(1)
            before = [_tasks(r.proc.pid) for r in running]
            cpu_before = [procstat.cpu_seconds(r.proc.pid) for r in running]
            series = [0] * len(running)
            start = time.monotonic()
            for second in range(seconds):
                order = range(len(running)) if second % 2 == 0 else reversed(range(len(running)))
                for i in order:
                    body = running[i].scrape()
                    series[i] = sum(1 for line in body.splitlines()
                                    if line and not line.startswith(b"#"))
                time.sleep(max(0.0, start + second + 1 - time.monotonic()))
            wall = time.monotonic() - start
            after = [_tasks(r.proc.pid) for r in running]
            cpu_after = [procstat.cpu_seconds(r.proc.pid) for r in running]
            rss = [procstat.rss_bytes(r.proc.pid) for r in running]
        finally:
            for r in running:
                r.conn.close()
                stop_process(r.proc)
    out = []
    for r, b, a, n, c0, c1, m in zip(running, before, after, series, cpu_before, cpu_after,
                                     rss, strict=True):
        # The whole process's CPU (threads that ended included, in ticks); the threads'
        # own, exact; wake-ups of live threads.
        per_thread = sorted(((a[t][0] - b.get(t, (0.0, 0))[0]) * 1000 / wall,
                             (a[t][1] - b.get(t, (0.0, 0))[1]) / wall) for t in a)[::-1]
        out.append(Measured(
            tree=r.tree, cpu_ms_per_second=(c1 - c0) * 1000 / wall,
            thread_cpu_ms_per_second=sum(c for c, _ in per_thread),
            wakeups_per_second=sum(w for _, w in per_thread), series=n, rss_bytes=m,
            threads=len(a), busiest=per_thread[:4]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--gzip", action="store_true",
                    help="ask for gzip too (Accept-Encoding), as Prometheus does by default")
    ap.add_argument("trees", nargs="*", type=Path, default=[REPO])
    args = ap.parse_args()
    for m in measure(args.trees, args.seconds, args.gzip):
        busiest = ", ".join(f"{c:.2f} ms/s {w:.1f} wake/s" for c, w in m.busiest)
        print(f"{m.tree}: {m.cpu_ms_per_second:.2f} ms CPU/s (threads: "
              f"{m.thread_cpu_ms_per_second:.2f}), {m.wakeups_per_second:.1f} wake-ups/s, "
              f"{m.series} series, RSS {m.rss_bytes / 2**20:.1f} MiB, {m.threads} threads "
              f"[busiest: {busiest}]")


if __name__ == "__main__":
    main()
