"""Benchmark 4: footprint of the real exporter process on a fake 8-GPU node with 200
GPU processes, default collectors (no eBPF): resident memory right after start and
along 10,000 scrapes, CPU per scrape (and so per hour at a 15 s interval), threads.

`GPU_EXPORTER_BENCH_SCRAPES` lowers the count for local iteration.
"""

from __future__ import annotations

import http.client
import os
import time
from pathlib import Path
from typing import Any

from tests.bench import fleet, procstat
from tests.bench.conftest import Results
from tests.fake_nvml import scenario as fake
from tests.helpers import exporter, find, parse

SCRAPES = int(os.environ.get("GPU_EXPORTER_BENCH_SCRAPES", "10000"))
SAMPLE_EVERY = max(1, SCRAPES // 10)
IDLE_SECONDS = 10.0
INTERVAL_SECONDS = 15.0


def test_footprint_over_10000_scrapes(benchmark: Any, results: Results,
                                      tmp_path: Path) -> None:
    path = fleet.scenario(8, 200).write(tmp_path / "node.scenario")
    with exporter(env=fake.env(fake.build(), path)) as exp:
        pid = exp.proc.pid
        rss_start = procstat.rss_bytes(pid)
        threads_start = procstat.threads(pid)
        series = parse(exp.scrape())
        assert [s.value for s in find(series, "hw_gpu_up")] == [1.0] * 8
        rss_first = procstat.rss_bytes(pid)

        # Idle cost: what the exporter burns between scrapes (listeners, timers).
        cpu0 = procstat.cpu_seconds(pid)
        time.sleep(IDLE_SECONDS)
        idle_cpu_per_second = (procstat.cpu_seconds(pid) - cpu0) / IDLE_SECONDS

        conn = http.client.HTTPConnection("127.0.0.1", exp.port, timeout=30)
        done = [0]
        rss_curve: list[tuple[int, int]] = [(0, rss_first)]
        peak_threads = [threads_start]

        def sample() -> None:
            if done[0] and done[0] % SAMPLE_EVERY == 0:
                rss_curve.append((done[0], procstat.rss_bytes(pid)))
                peak_threads[0] = max(peak_threads[0], procstat.threads(pid))

        def scrape() -> None:
            conn.request("GET", "/metrics")
            r = conn.getresponse()
            body = r.read()
            assert r.status == 200 and b"hw_gpu_up" in body
            done[0] += 1

        cpu1 = procstat.cpu_seconds(pid)
        wall1 = time.monotonic()
        benchmark.group = "footprint: scrape over HTTP, 8 GPUs, 200 processes"
        benchmark.pedantic(scrape, setup=sample, rounds=SCRAPES, iterations=1)
        cpu_per_scrape = (procstat.cpu_seconds(pid) - cpu1 - idle_cpu_per_second *
                          (time.monotonic() - wall1)) / SCRAPES
        sample()
        conn.close()
        rss_end = procstat.rss_bytes(pid)
        threads_end = procstat.threads(pid)
        series = parse(exp.scrape())
        assert [s.value for s in find(series, "hw_gpu_up")] == [1.0] * 8

    # Steady state: the second half (allocator arenas, caches and interned strings
    # settle over the first thousands of scrapes).
    after_warmup = [rss for n, rss in rss_curve if n >= SCRAPES // 2]
    values = {
        "scrapes": SCRAPES,
        "rss_after_start": rss_start,
        "rss_after_first_scrape": rss_first,
        "rss_end": rss_end,
        "rss_curve": rss_curve,
        "rss_growth_after_warmup": (after_warmup[-1] - after_warmup[0]) if after_warmup else 0,
        "cpu_seconds_per_scrape": cpu_per_scrape,
        "idle_cpu_seconds_per_second": idle_cpu_per_second,
        "cpu_seconds_per_hour_at_15s": cpu_per_scrape * 3600 / INTERVAL_SECONDS
        + idle_cpu_per_second * 3600,
        "threads_start": threads_start,
        "threads_peak": peak_threads[0],
        "threads_end": threads_end,
        "series": len(series),
    }
    benchmark.extra_info.update({k: v for k, v in values.items() if k != "rss_curve"})
    results.put("footprint", "8gpu-200proc", values)


# Resident memory added by each group of imports, in import order, in a fresh
# interpreter: the measured cause behind "RSS after start". The exporter's default path
# first (what `serve` loads on any host), then what only some hosts load on top.
_IMPORT_STEPS = (
    ("python interpreter", ""),
    ("prometheus_client, pynvml, click", "import prometheus_client, pynvml, click"),
    ("the rest of gpu_exporter", "import gpu_exporter.commands.cli"),
    ("only on a Kubernetes node: grpc + protobuf (kubelet PodResources client)",
     "import grpc, gpu_exporter.readers.kubelet.podresources_v1.api_pb2"),
    ("only with --web.config.file: yaml, bcrypt", "import yaml, bcrypt"),
)
_DEFAULT_PATH_STEPS = 3  # the steps above that every exporter loads
_IMPORT_SCRIPT = """
import json, sys
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) * 1024
out = []
for name, stmt in json.loads(sys.argv[1]):
    exec(stmt)
    out.append((name, rss()))
print(json.dumps(out))
"""


def test_import_footprint(benchmark: Any, results: Results) -> None:
    import json
    import subprocess
    import sys

    def run() -> list[tuple[str, int]]:
        res = subprocess.run([sys.executable, "-c", _IMPORT_SCRIPT, json.dumps(_IMPORT_STEPS)],
                             capture_output=True, text=True, check=True)
        return [tuple(x) for x in json.loads(res.stdout)]  # type: ignore[misc]

    benchmark.group = "footprint: interpreter start + every import"
    steps = benchmark.pedantic(run, rounds=5, iterations=1)
    assert [name for name, _ in steps] == [name for name, _ in _IMPORT_STEPS]
    added = [(name, rss - (steps[i - 1][1] if i else 0)) for i, (name, rss) in enumerate(steps)]
    results.put("footprint_imports", "steps",
                {"added_bytes": added, "total": steps[_DEFAULT_PATH_STEPS - 1][1]})
