"""Benchmark 6: the series budget, counted from real scrapes of the real exporter
process on a fake 8-GPU node at default settings: series per GPU, per process and per
node, and what a fleet of 1,000 such nodes sends at a 15 s scrape interval."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.model import catalogue as c
from tests.bench import fleet
from tests.bench.conftest import Results
from tests.fake_nvml import scenario as fake
from tests.helpers import Series, exporter, parse

NODES = 1000
INTERVAL_SECONDS = 15.0


def _scope(s: Series) -> str:
    metric = c.BY_NAME.get(s.name) or c.BY_NAME.get(s.name.rsplit("_", 1)[0])
    if metric is None:
        return "unknown"
    return metric.scope.key


@pytest.mark.parametrize("node", ["h100x8", "h100x8+200proc"])
def test_series_budget(benchmark: Any, results: Results, tmp_path: Path, node: str) -> None:
    sc = fake.h100x8() if node == "h100x8" else fleet.scenario(8, 200)
    path = sc.write(tmp_path / "node.scenario")
    with exporter(env=fake.env(fake.build(), path)) as exp:
        exp.scrape()  # rates and per-process deltas need a previous scrape
        benchmark.group = "series budget: one scrape over HTTP"
        text = benchmark.pedantic(exp.scrape, rounds=20, iterations=1)
    series = parse(text)
    by_scope = Counter(_scope(s) for s in series)
    by_family = Counter(s.name for s in series)
    gpus = sum(1 for s in series if s.name == "hw_gpu_up")
    assert gpus == 8
    assert by_scope["unknown"] == 0, [s.name for s in series if _scope(s) == "unknown"]
    processes = sum(len(d.processes) for d in sc.devices)
    values = {
        "gpus": gpus,
        "processes": processes,
        "series_total": len(series),
        "by_scope": dict(by_scope),
        "by_family": dict(by_family),
        "device_series_per_gpu": by_scope["device"] / gpus,
        "process_series_per_process": by_scope["process"] / processes if processes else 0,
        "fleet_nodes": NODES,
        "fleet_series": len(series) * NODES,
        "fleet_samples_per_second": len(series) * NODES / INTERVAL_SECONDS,
        "exposition_bytes": len(text.encode()),
    }
    benchmark.extra_info.update({k: v for k, v in values.items() if k != "by_family"})
    results.put("series_budget", node, values)
