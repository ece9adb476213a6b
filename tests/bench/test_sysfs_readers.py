"""Benchmark 7: the AMD and Intel readers against a floor of reading the same sysfs files
with plain open/read, side by side in one run.

Reader: one read of every card of the vendor, as one scrape does
(`readers.sysfs.amd.AmdReader.read`, `readers.sysfs.intel.IntelReader.read`, identities and each
card's layout already known, as after the first scrape). Floor: the files that very
read opened and the folders it listed, recorded while it ran (`os.open` and
`os.listdir` wrapped), replayed with nothing but `os.open` + `os.read` + `os.close` per
file and `os.listdir` per folder: no parsing, no records, no checks. The two alternate
round by round. The tree is the real captures in tests/fixtures/sysfs, on an ordinary
filesystem: a real sysfs read goes through the driver (tens of µs for some amdgpu
files), so on a real card the floor is larger and the ratio smaller than here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.model.records import GpuReading
from gpu_exporter.readers.file_values import Problems
from gpu_exporter.readers.sysfs import amd, intel
from gpu_exporter.readers.sysfs.pci import discover
from tests.bench import procstat
from tests.bench.conftest import Results
from tests.bench.stats import percentile
from tests.sysfs.tree import FakeSysfs

ROUNDS = 3000
CARDS = {
    "amd": (("rx6900xt", "0000:0c:00.0", 0), ("vega56", "0000:0b:00.0", 1),
            ("phoenix", "0000:64:00.0", 2)),
    "intel": (("a380", "0000:03:00.0", 3), ("b580", "0000:04:00.0", 4)),
}


@dataclass
class FileRecording:
    files: list[str] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)


@contextmanager
def recording_files() -> Iterator[FileRecording]:
    """Every file opened (successfully) and folder listed while the block runs."""
    rec = FileRecording()
    real_open, real_listdir = os.open, os.listdir

    def opened(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = real_open(path, flags, *args, **kwargs)
        rec.files.append(os.fspath(path))
        return fd

    def listed(path: Any = ".") -> list[str]:
        names = real_listdir(path)
        rec.folders.append(os.fspath(path))
        return names

    os.open, os.listdir = opened, listed  # type: ignore[assignment]
    try:
        yield rec
    finally:
        os.open, os.listdir = real_open, real_listdir  # type: ignore[assignment]


def floor_read(rec: FileRecording) -> None:
    for folder in rec.folders:
        os.listdir(folder)
    for path in rec.files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.read(fd, 8192)
        finally:
            os.close(fd)


def vendor_reader(tree: FakeSysfs, vendor: str) -> Callable[[], list[GpuReading]]:
    gpus = [g for g in discover(tree.root, [vendor]).values()]  # type: ignore[list-item]
    assert len(gpus) == len(CARDS[vendor])
    if vendor == "amd":
        amd_reader = amd.AmdReader()
        idents = [amd.identity(g, tree.root) for g in gpus]
        return lambda: [amd_reader.read(g, i, Problems())
                        for g, i in zip(gpus, idents, strict=True)]
    reader = intel.IntelReader()
    idents = [intel.identity(g, tree.root) for g in gpus]
    return lambda: [reader.read(g, i, Problems()) for g, i in zip(gpus, idents, strict=True)]


@pytest.mark.parametrize("vendor", ["amd", "intel"])
def test_reader_vs_plain_reads(benchmark: Any, results: Results, tmp_path: Path,
                               vendor: str) -> None:
    tree = FakeSysfs(tmp_path / "sys")
    for name, address, number in CARDS[vendor]:
        tree.add(name, address, number)
    read = vendor_reader(tree, vendor)
    read()  # first read: per-card state (Intel's energy baseline), caches
    with recording_files() as rec:
        readings = read()
    # The reader read what the cards have: every card up, with values.
    assert all(r.up for r in readings)
    assert all(r.temperature_celsius for r in readings)
    assert rec.files

    floor_times: list[float] = []

    def run_floor() -> None:
        t0 = time.perf_counter()
        floor_read(rec)
        floor_times.append(time.perf_counter() - t0)

    benchmark.group = f"sysfs reader: {vendor}, {len(readings)} cards"
    ours, other_load = procstat.pedantic_with_load(benchmark, read, run_floor, ROUNDS)
    values = {
        "vendor": vendor, "cards": len(readings), "rounds": ROUNDS,
        "files": len(rec.files), "folders": len(rec.folders), "other_load_cpus": other_load,
        "reader_p50": percentile(ours, 50), "reader_p99": percentile(ours, 99),
        "floor_p50": percentile(floor_times, 50), "floor_p99": percentile(floor_times, 99),
    }
    values["ratio_p50"] = values["reader_p50"] / values["floor_p50"]
    values["ratio_p99"] = values["reader_p99"] / values["floor_p99"]
    benchmark.extra_info.update(values)
    results.put("sysfs_readers", vendor, values)
