"""Benchmark 7b: the node power readers (ACPI power meters, RAPL through powercap)
against a floor of reading the same files with plain open/read, side by side in one run:
the method of benchmark 7 (`test_sysfs_readers.py`), whose recording and floor it reuses.

Reader: one scrape's reads, sources already found (as after start): every meter's
`power1_average` (`sources.sysfs.power_meter.read_watts`) and every RAPL zone's `energy_uj`
with its wrap accounted (`sources.sysfs.powercap.read_uj`, `EnergyTotals.joules`). The tree:
a Grace socket's four meters and a two-socket Xeon's package and DRAM zones
(tests/host/power_tree.py), on an ordinary filesystem.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gpu_exporter.sources.sysfs import power_meter, powercap
from gpu_exporter.sources.sysfs.sysfs import Problems
from tests.bench import procstat
from tests.bench.conftest import Results
from tests.bench.stats import percentile
from tests.bench.test_sysfs_readers import ROUNDS, floor_read, recording_files
from tests.host import power_tree


def test_node_power_readers_vs_plain_reads(benchmark: Any, results: Results,
                                           tmp_path: Path) -> None:
    power_tree.grace(tmp_path)
    power_tree.intel_two_sockets(tmp_path)
    meters = power_meter.find_meters(str(tmp_path))
    zones = powercap.find_zones(str(tmp_path), Problems())
    totals = powercap.EnergyTotals()

    def read() -> list[float | None]:
        problems = Problems()
        out = [power_meter.read_watts(m, problems) for m in meters]
        for z in zones:
            raw = powercap.read_uj(z, problems)
            out.append(None if raw is None else totals.joules(z, raw, time.monotonic()))
        return out

    read()
    with recording_files() as rec:
        values = read()
    assert None not in values and len(values) == 8  # 4 meters, 4 zones, all read
    assert len(rec.files) == 8

    floor_times: list[float] = []

    def run_floor() -> None:
        t0 = time.perf_counter()
        floor_read(rec)
        floor_times.append(time.perf_counter() - t0)

    benchmark.group = "node power readers: 4 meters, 4 RAPL zones"
    ours, other_load = procstat.pedantic_with_load(benchmark, read, run_floor, ROUNDS)
    out = {
        "vendor": "node power", "cards": "4 meters + 4 zones", "rounds": ROUNDS,
        "files": len(rec.files), "folders": len(rec.folders), "other_load_cpus": other_load,
        "reader_p50": percentile(ours, 50), "reader_p99": percentile(ours, 99),
        "floor_p50": percentile(floor_times, 50), "floor_p99": percentile(floor_times, 99),
    }
    out["ratio_p50"] = out["reader_p50"] / out["floor_p50"]
    out["ratio_p99"] = out["reader_p99"] / out["floor_p99"]
    benchmark.extra_info.update(out)
    results.put("node_power_readers", "acpi+rapl", out)
