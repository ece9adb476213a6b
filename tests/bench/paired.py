"""Side by side: the exporter from two (or more) source trees on one fake node, measured
in the same run, alternately, as the shared 2-core VM requires (docs/performance.md,
"Issue #26"). A source tree is a folder holding a `gpu_exporter` package, e.g. the code
of a commit: `git archive <commit> gpu_exporter | tar -x -C /tmp/base`.

    python -m tests.bench.paired http GPUS PROCESSES ROUNDS name=tree ...
        real processes (default collectors, host included), scraped over keep-alive
        connections with Prometheus 2's Accept header, one side after the other (the
        order swapped every round); CPU of the whole process (all threads, schedstat)
        around each of its scrapes.
    python -m tests.bench.paired onehz GPUS PROCESSES SECONDS name=tree ...
        real processes each scraped once a second (the sides spread over the second);
        CPU per second of each whole process, idle included, and its RSS at the end.
    python -m tests.bench.paired burst GPUS PROCESSES SCRAPERS name=tree ...
        real processes: RSS after start, after SCRAPERS concurrent scrapers each side,
        and after 200 more scrapes one at a time.
    python -m tests.bench.paired scrapers GPUS PROCESSES ROUNDS name=tree ...
        real processes, each scraped over one keep-alive connection per scraper with
        that scraper's default Accept header (tests/scrapers.py: vmagent, Prometheus 2,
        Prometheus 3), every (tree, scraper) once a round in an order reversed every
        round; CPU of the whole process per scrape, and its ratio to vmagent's in the
        same tree (issue #34's target: at most 1.15x).
    python -m tests.bench.paired idle GPUS PROCESSES SECONDS name=tree ...
        real processes scraped 10 times, then left alone for SECONDS: CPU per second
        of all their threads (schedstat), and of each thread by name, and wake-ups.
    python -m tests.bench.paired inprocess GPUS PROCESSES KERNEL_SERIES ROUNDS name=tree ...
        one process per tree running `fleet.in_process` (the nvidia, processes and eBPF
        collectors, the eBPF one fed KERNEL_SERIES recorded series) asked for one
        scrape at a time (collect and OpenMetrics render), alternately; CPU of all its
        threads per scrape.

With GPU_EXPORTER_BENCH_REAL_PROCESSES=1 the node's GPU processes are live `sleep`
processes, whose /proc entries the exporter reads as on a real node (otherwise their pids
have no /proc entry and their facts are never read).

p50 and p99 are nearest-rank over the rounds; ratios are against the first tree.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import http.client
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from tests.bench import fleet
from tests.bench.stats import percentile
from tests.fake_nvml import scenario as fake
from tests.helpers import eventually, free_port, stop_process
from tests.scrapers import PROMETHEUS_2, PROMETHEUS_3, VMAGENT, Scraper

ACCEPT = PROMETHEUS_2.accept
REPO = Path(__file__).resolve().parents[2]


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of `pid`, ns (schedstat: no 10 ms clock ticks)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
    return total


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def scrape(conn: http.client.HTTPConnection, accept: str = ACCEPT) -> bytes:
    conn.request("GET", "/metrics", headers={"Accept": accept})
    response = conn.getresponse()
    body = response.read()
    assert response.status == 200, response.status
    return body


@contextmanager
def real_processes(count: int) -> Iterator[list[int]]:
    """`count` live processes (`sleep`), as a node's GPU processes would be: /proc
    entries whose comm, cgroup and stat the processes collector reads."""
    procs = [subprocess.Popen(["sleep", "3600"]) for _ in range(count)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


REAL = os.environ.get("GPU_EXPORTER_BENCH_REAL_PROCESSES") == "1"


@contextmanager
def servers(gpus: int, processes: int, trees: Sequence[tuple[str, str]], real: bool = REAL,
            ) -> Iterator[list[tuple[str, subprocess.Popen[bytes], http.client.HTTPConnection]]]:
    """The real exporter from each tree on one fake node; with
    GPU_EXPORTER_BENCH_REAL_PROCESSES=1 its GPU processes are live ones (real_processes),
    else pids without a /proc entry."""
    with tempfile.TemporaryDirectory() as tmp, real_processes(processes if real else 0) as pids:
        path = fleet.scenario(gpus, processes, pids=pids).write(Path(tmp) / "node.scenario")
        env = {**os.environ, **fake.env(fake.build(), path)}
        started: list[tuple[str, subprocess.Popen[bytes], int]] = []
        try:
            for name, tree in trees:
                port = free_port()
                proc = subprocess.Popen(
                    [sys.executable, "-m", "gpu_exporter",
                     f"--web.listen-address=127.0.0.1:{port}"],
                    env={**env, "PYTHONPATH": tree}, cwd=tmp, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
                started.append((name, proc, port))
            out = []
            for name, proc, port in started:
                out.append((name, proc, eventually(
                    partial(_first_scrape, proc, port), 60, f"{name}: the first scrape",
                    interval=0.2, retry_on=(AssertionError, OSError))))
            for _ in range(10):  # warm-up: lanes sized, caches filled
                for _, _, conn in out:
                    scrape(conn)
            yield out
        finally:
            for _, proc, _ in started:
                stop_process(proc)


def _first_scrape(proc: subprocess.Popen[bytes], port: int) -> http.client.HTTPConnection:
    """A connection that has been answered once (OSError: not listening yet)."""
    assert proc.poll() is None, f"exited {proc.returncode}"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    scrape(conn)
    return conn


def report(what: str, results: dict[str, list[float]], unit: str = "ms") -> None:
    base = next(iter(results.values()))
    for name, values in results.items():
        p50, p99 = percentile(values, 50), percentile(values, 99)
        print(f"{what} {name}: p50 {p50:.2f} {unit}, p99 {p99:.2f} {unit}, ratio to "
              f"{next(iter(results))} p50 {p50 / percentile(base, 50):.2f}, "
              f"p99 {p99 / percentile(base, 99):.2f} ({len(values)} rounds)")


def http_rounds(gpus: int, processes: int, rounds: int, trees: Sequence[tuple[str, str]]) -> None:
    results: dict[str, list[float]] = {name: [] for name, _ in trees}
    with servers(gpus, processes, trees) as running:
        for i in range(rounds):
            for name, proc, conn in (running if i % 2 == 0 else running[::-1]):
                before = cpu_ns(proc.pid)
                scrape(conn)
                results[name].append((cpu_ns(proc.pid) - before) / 1e6)
            time.sleep(0.02)
    report(f"{gpus} GPUs, {processes} processes, CPU per scrape over HTTP,", results)


def scrapers_rounds(gpus: int, processes: int, rounds: int, trees: Sequence[tuple[str, str]],
                    scrapers: Sequence[Scraper] = (VMAGENT, PROMETHEUS_2, PROMETHEUS_3),
                    ) -> dict[str, dict[str, list[float]]]:
    """CPU ms per scrape by tree and scraper (the first scraper is the reference)."""
    results: dict[str, dict[str, list[float]]] = {
        name: {s.name: [] for s in scrapers} for name, _ in trees}
    with servers(gpus, processes, trees) as running:
        sides = []
        for name, proc, first in running:
            for s in scrapers:
                conn = http.client.HTTPConnection("127.0.0.1", first.port, timeout=30)
                for _ in range(10):  # warm-up: this negotiation's lines made
                    scrape(conn, s.accept)
                sides.append((name, proc, s, conn))
        try:
            for i in range(rounds):
                for name, proc, s, conn in (sides if i % 2 == 0 else sides[::-1]):
                    before = cpu_ns(proc.pid)
                    scrape(conn, s.accept)
                    results[name][s.name].append((cpu_ns(proc.pid) - before) / 1e6)
                time.sleep(0.02)
        finally:
            for *_, conn in sides:
                conn.close()
    for name, by_scraper in results.items():
        report(f"{gpus} GPUs, {processes} processes, CPU per scrape over HTTP, {name},",
               by_scraper)
    return results


def one_hertz(gpus: int, processes: int, seconds: int, trees: Sequence[tuple[str, str]],
              real: bool = REAL) -> dict[str, dict[str, float]]:
    """By tree: CPU per second (ms), per scrape p50 and p99 (ms), RSS (MiB) after the
    first second and at the end."""
    out: dict[str, dict[str, float]] = {}
    with servers(gpus, processes, trees, real) as running:
        time.sleep(1)
        before = {name: cpu_ns(proc.pid) for name, proc, _ in running}
        first_rss = {name: rss_mib(proc.pid) for name, proc, _ in running}
        per_scrape: dict[str, list[float]] = {name: [] for name, _, _ in running}
        t0 = time.monotonic()
        for second in range(seconds):
            for k, (name, proc, conn) in enumerate(running):
                time.sleep(max(0.0, t0 + second + k / len(running) - time.monotonic()))
                start = cpu_ns(proc.pid)
                scrape(conn)
                per_scrape[name].append((cpu_ns(proc.pid) - start) / 1e6)
        time.sleep(max(0.0, t0 + seconds - time.monotonic()))
        wall = time.monotonic() - t0
        for name, proc, _ in running:
            per_second = (cpu_ns(proc.pid) - before[name]) / 1e6 / wall
            got = per_scrape[name]
            out[name] = {"cpu_ms_per_second": per_second, "p50_ms": percentile(got, 50),
                         "p99_ms": percentile(got, 99), "rss_first_mib": first_rss[name],
                         "rss_end_mib": rss_mib(proc.pid)}
            print(f"{gpus} GPUs, {processes} processes, 1 Hz for {seconds} s, {name}: "
                  f"{per_second:.2f} ms CPU per second; CPU per scrape p50 "
                  f"{percentile(got, 50):.2f} ms, p99 {percentile(got, 99):.2f} ms; RSS "
                  f"{first_rss[name]:.1f} MiB after the first second, "
                  f"{rss_mib(proc.pid):.1f} MiB at the end")
    return out


def thread_cpu_ns(pid: int) -> dict[str, tuple[int, int]]:
    """(CPU ns, voluntary context switches) of each of `pid`'s threads, by "tid name"
    (Python threads all carry the interpreter's name)."""
    out: dict[str, tuple[int, int]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            task = Path(f"/proc/{pid}/task/{tid}")
            name = f"{tid} {(task / 'comm').read_text().strip()}"
            ns = int((task / "schedstat").read_text().split()[0])
            switches = next(int(line.split()[1]) for line in
                            (task / "status").read_text().splitlines()
                            if line.startswith("voluntary_ctxt_switches:"))
            cpu, woke = out.get(name, (0, 0))
            out[name] = cpu + ns, woke + switches
    return out


def idle(gpus: int, processes: int, seconds: int, trees: Sequence[tuple[str, str]]
         ) -> dict[str, dict[str, float]]:
    """By tree: CPU per second of all threads (ms) and wake-ups per second."""
    out: dict[str, dict[str, float]] = {}
    with servers(gpus, processes, trees) as running:
        time.sleep(1)  # the last scrape's hand-offs done
        before = {name: thread_cpu_ns(proc.pid) for name, proc, _ in running}
        t0 = time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - t0
        for name, proc, _ in running:
            after = thread_cpu_ns(proc.pid)
            rows = {t: (cpu - before[name].get(t, (0, 0))[0],
                        woke - before[name].get(t, (0, 0))[1])
                    for t, (cpu, woke) in after.items()}
            total = sum(cpu for cpu, _ in rows.values())
            wakes = sum(woke for _, woke in rows.values())
            busiest = sorted(rows.items(), key=lambda r: -r[1][0])[:4]
            out[name] = {"cpu_ms_per_second": total / 1e6 / wall,
                         "wakeups_per_second": wakes / wall}
            print(f"{gpus} GPUs, {processes} processes, idle {seconds} s, {name}: "
                  f"{total / 1e6 / wall:.3f} ms CPU per second, {wakes / wall:.1f} wake-ups "
                  "per second; by thread: " + ", ".join(
                      f"{t} {cpu / 1e6 / wall:.3f} ms/s {woke / wall:.1f}/s"
                      for t, (cpu, woke) in busiest))
    return out


def burst(gpus: int, processes: int, scrapers: int, trees: Sequence[tuple[str, str]]
          ) -> dict[str, dict[str, float]]:
    """RSS after start-up, then after `scrapers` concurrent scrapers (5 scrapes each,
    both sides at once), then after 200 more scrapes one at a time (MiB, by tree)."""
    out: dict[str, dict[str, float]] = {}
    with servers(gpus, processes, trees) as running:
        after_start = {name: rss_mib(proc.pid) for name, proc, _ in running}

        def hammer(port: int) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            for _ in range(5):
                scrape(conn)
            conn.close()

        ports = [conn.port for _, _, conn in running]
        with concurrent.futures.ThreadPoolExecutor(scrapers * len(ports)) as pool:
            list(pool.map(hammer, [p for p in ports for _ in range(scrapers)]))
        after_burst = {name: rss_mib(proc.pid) for name, proc, _ in running}
        for _ in range(200):
            for _, _, conn in running:
                scrape(conn)
        for name, proc, _ in running:
            out[name] = {"after_start_mib": after_start[name],
                         "after_burst_mib": after_burst[name],
                         "after_more_mib": rss_mib(proc.pid)}
            print(f"{gpus} GPUs, {processes} processes, {name}: RSS {after_start[name]:.1f} "
                  f"MiB after start and 10 scrapes, {after_burst[name]:.1f} MiB after "
                  f"{scrapers} concurrent scrapers, {rss_mib(proc.pid):.1f} MiB after 200 "
                  "more")
    return out


_SIDE = """
import sys, tempfile, time
from pathlib import Path
from tests.bench import fleet
from gpu_exporter.scrape.render import TextRenderer
gpus, processes, kernel_series = (int(a) for a in sys.argv[1:4])
renderer = TextRenderer()
with tempfile.TemporaryDirectory() as tmp:
    with fleet.in_process(fleet.scenario(gpus, processes), Path(tmp), kernel_series) as (_, reg):
        for _ in range(10):
            renderer.render_openmetrics(reg)
        print("ready", flush=True)
        for _ in sys.stdin:
            t0 = time.process_time()
            renderer.render_openmetrics(reg)
            print(time.process_time() - t0, flush=True)
"""


def in_process(gpus: int, processes: int, kernel_series: int, rounds: int,
               trees: Sequence[tuple[str, str]]) -> dict[str, list[float]]:
    sides: list[tuple[str, subprocess.Popen[str]]] = []
    try:
        for name, tree in trees:
            proc = subprocess.Popen(
                [sys.executable, "-c", _SIDE, str(gpus), str(processes), str(kernel_series)],
                # Not run in the checkout: `python -c` puts its folder first on sys.path,
                # and every side would import the checkout's package, not its tree's.
                env={**os.environ, "PYTHONPATH": f"{tree}:{REPO}"}, cwd=tempfile.gettempdir(),
                text=True,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", name
            sides.append((name, proc))
        results: dict[str, list[float]] = {name: [] for name, _ in trees}
        for i in range(rounds):
            for name, proc in (sides if i % 2 == 0 else sides[::-1]):
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write("\n")
                proc.stdin.flush()
                results[name].append(float(proc.stdout.readline()) * 1000)
    finally:
        for _, proc in sides:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(60)
    report(f"{gpus} GPUs, {processes} processes, {kernel_series} kernel series, CPU per "
           "scrape in process,", results)
    return results


def main(argv: Sequence[str]) -> None:
    mode, *rest = argv
    numbers = [int(a) for a in rest if "=" not in a]
    trees = [(a.split("=", 1)[0], a.split("=", 1)[1]) for a in rest if "=" in a]
    if mode == "http":
        http_rounds(numbers[0], numbers[1], numbers[2], trees)
    elif mode == "onehz":
        one_hertz(numbers[0], numbers[1], numbers[2], trees)
    elif mode == "burst":
        burst(numbers[0], numbers[1], numbers[2], trees)
    elif mode == "idle":
        idle(numbers[0], numbers[1], numbers[2], trees)
    elif mode == "scrapers":
        scrapers_rounds(numbers[0], numbers[1], numbers[2], trees)
    elif mode == "inprocess":
        in_process(numbers[0], numbers[1], numbers[2], numbers[3], trees)
    else:
        raise SystemExit(f"unknown mode {mode!r}: http, onehz, burst, idle, scrapers or inprocess")


if __name__ == "__main__":
    main(sys.argv[1:])
