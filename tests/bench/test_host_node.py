"""Benchmark 9: a 2-GPU node with host metrics at 1 Hz (issue #26's target: ≤ 3 ms of
CPU a second). The real exporter with its default collectors on the fake node of
`tests/bench/host_node.py` (2 GPUs, 1 GPU process), scraped once a second with
Prometheus 2's Accept header, with and without gzip (Prometheus asks for it unless
told not to); CPU per second, wake-ups and resident memory.

`GPU_EXPORTER_BENCH_HOST_SECONDS` (default 60) sets the length. A change is compared
side by side with `python -m tests.bench.host_node OLD_TREE .` (see that module).
"""

from __future__ import annotations

import os
from typing import Any

from tests.bench import host_node
from tests.bench.conftest import Results
from tests.helpers import REPO

SECONDS = int(os.environ.get("GPU_EXPORTER_BENCH_HOST_SECONDS", "60"))


def test_two_gpus_with_host_at_1hz(benchmark: Any, results: Results) -> None:
    # Two exporters side by side: one asked for plain answers, one for gzip as
    # Prometheus asks by default.
    measured: list[host_node.Measured] = []
    benchmark.group = "2 GPUs + host metrics, 1 Hz"
    benchmark.pedantic(lambda: measured.extend(
        host_node.measure([REPO, REPO], SECONDS, gzipped=[False, True])),
                       rounds=1, iterations=1)
    for m, case in zip(measured, ("2gpu-1proc-1hz", "2gpu-1proc-1hz-gzip"), strict=True):
        assert m.series > 200  # GPU, process, host and self series all served
        values = {
            "seconds": SECONDS,
            "gzip": case.endswith("gzip"),
            "cpu_ms_per_second": m.cpu_ms_per_second,
            "thread_cpu_ms_per_second": m.thread_cpu_ms_per_second,
            "wakeups_per_second": m.wakeups_per_second,
            "series": m.series,
            "rss_bytes": m.rss_bytes,
            "threads": m.threads,
        }
        benchmark.extra_info[case] = values
        results.put("host_node", case, values)
