"""Benchmark 7b: the node power readers (ACPI power meters, RAPL through powercap)
against a floor of reading the same files with plain open/read, side by side in one run:
the method of benchmark 7 (`test_sysfs_readers.py`), whose recording and floor it reuses.

Reader: one scrape's reads, sources already found and read once (as after the first
scrape): every meter's `power1_average` (`readers.sysfs.power_meter.read_watts`) and every
RAPL zone's `energy_uj` with its wrap accounted (`readers.sysfs.powercap.read_uj`,
`EnergyTotals.joules`). Each file is held open after its first read (`files.HeldFile`):
a scrape is one `pread` per file, and the parse. Floor: the files the first read opened,
each opened, read and closed (node_exporter's way, and the readers' before they held
their files). Also timed, for where the rest goes: one `pread` per file on descriptors
held open, the system calls of the held reads alone. The three alternate round by
round. The tree: a Grace socket's four meters and a two-socket Xeon's package and DRAM
zones (tests/host/power_tree.py), on an ordinary filesystem.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from gpu_exporter.readers.file_values import Problems
from gpu_exporter.readers.sysfs import power_meter, powercap
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

    with recording_files() as rec:
        read()  # the first read opens the files it then holds
    assert len(rec.files) == 8
    with recording_files() as again:
        values = read()
    assert None not in values and len(values) == 8  # 4 meters, 4 zones, all read
    assert not again.files  # held: nothing opened again

    floor_times: list[float] = []
    pread_times: list[float] = []
    held = [os.open(p, os.O_RDONLY) for p in rec.files]

    def run_floors() -> None:
        t0 = time.perf_counter()
        floor_read(rec)
        t1 = time.perf_counter()
        for fd in held:
            os.pread(fd, 8192, 0)
        t2 = time.perf_counter()
        floor_times.append(t1 - t0)
        pread_times.append(t2 - t1)

    benchmark.group = "node power readers: 4 meters, 4 RAPL zones"
    try:
        ours, other_load = procstat.pedantic_with_load(benchmark, read, run_floors, ROUNDS)
    finally:
        for fd in held:
            os.close(fd)
        power_meter.close(meters)
        powercap.close(zones)
    out = {
        "vendor": "node power", "cards": "4 meters + 4 zones", "rounds": ROUNDS,
        "files": len(rec.files), "folders": len(rec.folders), "other_load_cpus": other_load,
        "reader_p50": percentile(ours, 50), "reader_p99": percentile(ours, 99),
        "floor_p50": percentile(floor_times, 50), "floor_p99": percentile(floor_times, 99),
        "pread_p50": percentile(pread_times, 50), "pread_p99": percentile(pread_times, 99),
    }
    out["ratio_p50"] = out["reader_p50"] / out["floor_p50"]
    out["ratio_p99"] = out["reader_p99"] / out["floor_p99"]
    benchmark.extra_info.update(out)
    results.put("node_power_readers", "acpi+rapl", out)
