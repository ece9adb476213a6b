"""Benchmark 5: our AMD reader against node_exporter's `drm` collector on the same fake
/sys tree (real card captures), both real processes, scraped alternately the same
number of times over keep-alive connections: wall time and CPU time per scrape.

The tree holds the Vega 56 and the Phoenix APU captures. node_exporter 1.5 (Debian 12)
panics on the RX 6900 XT capture (nil pointer in procfs' parseClassDRMAMDGPUCard), so
that card would leave the peer nothing to compare; it is left out of this tree.
"""

from __future__ import annotations

import http.client
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpu_exporter.collectors import REGISTRY
from tests.bench import procstat
from tests.bench.conftest import Results
from tests.bench.stats import percentile
from tests.helpers import exporter, find, free_port, parse, require_tool, wait_started
from tests.sysfs.tree import FakeSysfs

SCRAPES = 300
NODE_EXPORTER = "prometheus-node-exporter"


@contextmanager
def node_exporter(sysfs: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    proc = subprocess.Popen(
        [require_tool(NODE_EXPORTER), "--collector.disable-defaults", "--collector.drm",
         f"--path.sysfs={sysfs}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        def serving() -> bool:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/metrics")
            return conn.getresponse().status == 200

        wait_started(proc, serving, lambda: "(its output is not kept)", "node_exporter", 20)
        yield proc, port
    finally:
        proc.terminate()
        proc.wait(10)


def _client(port: int) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def scrape() -> str:
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        body = r.read()
        assert r.status == 200
        return body.decode()

    return scrape


def test_amd_reader_vs_node_exporter_drm(benchmark: Any, results: Results,
                                         tmp_path: Path) -> None:
    tree = FakeSysfs(tmp_path / "sys")
    tree.add("vega56", "0000:0b:00.0", 0)
    tree.add("phoenix", "0000:0c:00.0", 1)
    procfs = tmp_path / "proc"
    procfs.mkdir()
    ours_args = [*(f"--no-collector.{c.name}" for c in REGISTRY if c.name != "amd"),
                 f"--path.sysfs={tree.root}", f"--path.procfs={procfs}"]
    with exporter(ours_args) as ours, node_exporter(tree.root) as (peer, peer_port):
        scrape_ours, scrape_peer = _client(ours.port), _client(peer_port)
        ours_series, peer_series = parse(scrape_ours()), parse(scrape_peer())
        # Same data: both see the two cards.
        assert len(find(ours_series, "hw_gpu_up")) == 2
        assert len(find(peer_series, "node_drm_card_info")) == 2

        peer_times: list[float] = []

        def run_peer() -> None:
            t0 = time.perf_counter()
            scrape_peer()
            peer_times.append(time.perf_counter() - t0)

        cpu_ours0, cpu_peer0 = procstat.cpu_seconds(ours.proc.pid), procstat.cpu_seconds(peer.pid)
        benchmark.group = "peer: AMD, 2 cards, scrape over HTTP"
        benchmark.pedantic(scrape_ours, setup=run_peer, rounds=SCRAPES, iterations=1)
        cpu_ours = (procstat.cpu_seconds(ours.proc.pid) - cpu_ours0) / SCRAPES
        cpu_peer = (procstat.cpu_seconds(peer.pid) - cpu_peer0) / SCRAPES
        ours_times = list(benchmark.stats.stats.data)

    values = {
        "cards": 2, "scrapes": SCRAPES,
        "ours_p50": percentile(ours_times, 50), "ours_p99": percentile(ours_times, 99),
        "peer_p50": percentile(peer_times, 50), "peer_p99": percentile(peer_times, 99),
        "ours_cpu_per_scrape": cpu_ours, "peer_cpu_per_scrape": cpu_peer,
        "ours_device_series": sum(1 for s in ours_series if "hw_id" in s.labels),
        "peer_drm_series": sum(1 for s in peer_series if s.name.startswith("node_drm_")),
    }
    values["ratio_p50"] = values["ours_p50"] / values["peer_p50"]
    values["ratio_cpu"] = cpu_ours / cpu_peer if cpu_peer else float("inf")
    benchmark.extra_info.update(values)
    results.put("peer_drm", "vega56+phoenix", values)
