"""Benchmark 11: issue #34's targets for the scrape pipeline, each measured side by side
with the tree from before a change in one run (`GPU_EXPORTER_BENCH_BEFORE=DIR`, a tree
made by `git archive <commit> gpu_exporter | tar -x -C DIR`; without it, this checkout
alone):

- 1 Hz, 2 GPUs with host metrics and one GPU process: CPU per second of the whole
  process (target ≤ 3 ms/s);
- 1 Hz, 8 GPUs and 200 live GPU processes (their /proc entries read), default
  collectors: ≤ 10 ms/s;
- idle: all threads over `GPU_EXPORTER_BENCH_IDLE_SECONDS` (default 60) without a
  scrape, ≤ 0.5 ms/s;
- RSS after the 20-scraper burst at 8 GPUs and 200 processes: ≤ 43 MiB (a hold);
- 2,000 kernel-name series (the eBPF collector fed recorded series, in process): CPU per
  scrape, before and after.

`GPU_EXPORTER_BENCH_PIPELINE_SECONDS` (default 60) sets each 1 Hz run's length. The
functions are tests/bench/paired.py's, which runs each case by hand as well.
"""

from __future__ import annotations

import os
from typing import Any

from tests.bench import paired
from tests.bench.conftest import Results
from tests.bench.stats import percentile
from tests.helpers import REPO

SECONDS = int(os.environ.get("GPU_EXPORTER_BENCH_PIPELINE_SECONDS", "60"))
IDLE_SECONDS = int(os.environ.get("GPU_EXPORTER_BENCH_IDLE_SECONDS", "60"))
KERNEL_ROUNDS = 100


def _trees() -> list[tuple[str, str]]:
    trees = [("this checkout", str(REPO))]
    if os.environ.get("GPU_EXPORTER_BENCH_BEFORE"):
        trees.insert(0, ("before", os.environ["GPU_EXPORTER_BENCH_BEFORE"]))
    return trees


def test_pipeline_targets(benchmark: Any, results: Results) -> None:
    trees = _trees()
    got: dict[str, Any] = {}

    def run() -> None:
        got["onehz-2"] = paired.one_hertz(2, 1, SECONDS, trees, real=True)
        got["onehz-8"] = paired.one_hertz(8, 200, SECONDS, trees, real=True)
        got["idle"] = paired.idle(2, 1, IDLE_SECONDS, trees)
        got["burst"] = paired.burst(8, 200, 20, trees)
        got["kernels"] = paired.in_process(8, 200, 2000, KERNEL_ROUNDS, trees)

    benchmark.group = "pipeline targets (issue #34)"
    benchmark.pedantic(run, rounds=1, iterations=1)
    for tree, _ in trees:
        kernels = got["kernels"][tree]
        assert len(kernels) == KERNEL_ROUNDS and min(kernels) > 0, tree
        row = {
            "tree": tree, "seconds": SECONDS, "idle_seconds": IDLE_SECONDS,
            "onehz_2gpu_ms_per_second": got["onehz-2"][tree]["cpu_ms_per_second"],
            "onehz_2gpu_p99_ms": got["onehz-2"][tree]["p99_ms"],
            "onehz_8gpu_ms_per_second": got["onehz-8"][tree]["cpu_ms_per_second"],
            "onehz_8gpu_p99_ms": got["onehz-8"][tree]["p99_ms"],
            "idle_ms_per_second": got["idle"][tree]["cpu_ms_per_second"],
            "idle_wakeups_per_second": got["idle"][tree]["wakeups_per_second"],
            "burst_rss_mib": got["burst"][tree]["after_burst_mib"],
            "burst_rss_after_more_mib": got["burst"][tree]["after_more_mib"],
            "kernels_p50_ms": percentile(kernels, 50),
            "kernels_p99_ms": percentile(kernels, 99),
        }
        for key, value in row.items():
            if key != "tree":
                assert value > 0, (tree, key)
        benchmark.extra_info[tree] = row
        results.put("pipeline", tree, row)
