"""Benchmark 2: scrape time against the number of GPUs and against the number of
series (processes, one series each), to show the cost is linear: the report fits a line
through the medians and gives its R²."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest

from tests.bench import fleet
from tests.bench.conftest import Results
from tests.helpers import find, parse

ROUNDS = 40


def _measure(benchmark: Any, sc: Any, tmp_path: Path, group: str) -> tuple[float, int]:
    with fleet.in_process(sc, tmp_path) as (_exporter, registry):
        generate_latest(registry)
        series = parse(generate_latest(registry).decode())
        assert len(find(series, "hw_gpu_up")) == len(sc.devices)
        # every GPU's whole section was read: its last lines (GPM) too
        assert len(find(series, "hw_gpu_sm_active_ratio")) == len(sc.devices)
        benchmark.group = group
        benchmark.pedantic(lambda: generate_latest(registry), rounds=ROUNDS, iterations=1,
                           warmup_rounds=2)
        procs = sum(len(d.processes) for d in sc.devices)
        assert len(find(series, "process_gpu_memory_usage_bytes")) == procs
        return statistics.median(benchmark.stats.stats.data), len(series)


@pytest.mark.parametrize("gpus", [1, 2, 4, 8, 16, 32, 64])
def test_scrape_time_vs_gpus(benchmark: Any, results: Results, tmp_path: Path,
                             gpus: int) -> None:
    median, series = _measure(benchmark, fleet.scenario(gpus, 0), tmp_path,
                              "scaling: GPUs (0 processes)")
    results.put("scaling_gpus", str(gpus), {"x": gpus, "median": median, "series": series})


# Up to 200 per GPU: a device section of the fake holds at most 320 lines (MAX_KV).
@pytest.mark.parametrize("processes", [0, 200, 400, 800, 1200, 1600])
def test_scrape_time_vs_series(benchmark: Any, results: Results, tmp_path: Path,
                               processes: int) -> None:
    median, series = _measure(benchmark, fleet.scenario(8, processes), tmp_path,
                              "scaling: series (8 GPUs, N processes)")
    results.put("scaling_series", str(processes),
                {"x": series, "processes": processes, "median": median, "series": series})
