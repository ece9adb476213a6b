"""Benchmark 10: what each scraper's default negotiation costs (issue #34's target:
Prometheus 3's and Prometheus 2's at most 1.15x vmagent's CPU per scrape). The real
exporter with its default collectors on a 2-GPU node with host metrics and one GPU
process, scraped over one keep-alive connection per scraper with that scraper's Accept
header (tests/scrapers.py), the scrapers alternating round by round in one run; CPU of
the whole process (all threads, schedstat) around each scrape.

`GPU_EXPORTER_BENCH_BEFORE=DIR` (a tree from before a change: `git archive <commit>
gpu_exporter | tar -x -C DIR`) measures that tree in the same run, side by side.
`GPU_EXPORTER_BENCH_SCRAPER_ROUNDS` (default 300) sets the rounds.
"""

from __future__ import annotations

import os
from typing import Any

from tests.bench import paired
from tests.bench.conftest import Results
from tests.bench.stats import percentile
from tests.helpers import REPO

ROUNDS = int(os.environ.get("GPU_EXPORTER_BENCH_SCRAPER_ROUNDS", "300"))
GPUS, PROCESSES = 2, 1


def test_scrapers_default_negotiations(benchmark: Any, results: Results) -> None:
    trees = [("this checkout", str(REPO))]
    if os.environ.get("GPU_EXPORTER_BENCH_BEFORE"):
        trees.insert(0, ("before", os.environ["GPU_EXPORTER_BENCH_BEFORE"]))
    measured: dict[str, dict[str, list[float]]] = {}
    benchmark.group = "scrapers' negotiations"
    benchmark.pedantic(lambda: measured.update(
        paired.scrapers_rounds(GPUS, PROCESSES, ROUNDS, trees)), rounds=1, iterations=1)
    for tree, by_scraper in measured.items():
        reference = next(iter(by_scraper.values()))
        for scraper, values in by_scraper.items():
            assert len(values) == ROUNDS and min(values) > 0, (tree, scraper)
            row = {
                "tree": tree, "scraper": scraper, "gpus": GPUS, "processes": PROCESSES,
                "rounds": ROUNDS, "p50_ms": percentile(values, 50),
                "p99_ms": percentile(values, 99),
                "ratio_p50": percentile(values, 50) / percentile(reference, 50),
                "ratio_p99": percentile(values, 99) / percentile(reference, 99),
            }
            benchmark.extra_info[f"{tree}/{scraper}"] = row
            results.put("scrapers", f"{tree}/{scraper}", row)
