"""Benchmark 8: the text expositions (0.0.4 and OpenMetrics 1.0.0), prometheus_client's
`generate_latest` against
gpu_exporter/scrape/render.py (label text reused from the previous scrape), side by side in
one run on the same families: each round collects the exporter's families afresh (new
label strings, as a real scrape has) and renders them both ways, in alternating order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.registry import CollectorRegistry

from gpu_exporter.scrape.render import TextRenderer
from tests.bench import fleet, floor
from tests.bench.conftest import Results
from tests.bench.stats import percentile

PROCESSES, KERNEL_SERIES, ROUNDS = 200, 2000, 40


@pytest.mark.parametrize("variant", ["text", "openmetrics"])
@pytest.mark.parametrize("gpus", [1, 8, 64])
def test_render_vs_prometheus_client(benchmark: Any, results: Results, tmp_path: Path,
                                     gpus: int, variant: str) -> None:
    sc = fleet.scenario(gpus, PROCESSES)
    renderer = TextRenderer()
    theirs: Callable[[CollectorRegistry], bytes]
    mine: Callable[[CollectorRegistry], bytes]
    if variant == "text":
        theirs, mine = generate_latest, renderer.render
    else:
        theirs, mine = openmetrics_latest, renderer.render_openmetrics
    library: list[float] = []
    ours: list[float] = []
    with fleet.in_process(sc, tmp_path, KERNEL_SERIES) as (exporter, _):
        def cpu(fn: Any) -> tuple[float, bytes]:
            t0 = time.thread_time()
            out = fn()
            return time.thread_time() - t0, out

        def one_round() -> None:
            registry = floor.prebuilt_registry(list(exporter.collect()))
            sides = [(library, theirs), (ours, mine)]
            if len(library) % 2:
                sides.reverse()
            texts = []
            for times, render in sides:
                took, text = cpu(lambda r=render: r(registry))
                times.append(took)
                texts.append(text)
            assert texts[0] == texts[1]

        one_round()  # the renderer's first render: nothing to reuse yet
        library.clear()
        ours.clear()
        benchmark.group = f"render {variant} {gpus} GPU"
        benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    values = {
        "gpus": gpus, "variant": variant, "rounds": ROUNDS,
        "library_p50": percentile(library, 50), "library_p99": percentile(library, 99),
        "ours_p50": percentile(ours, 50), "ours_p99": percentile(ours, 99),
    }
    benchmark.extra_info.update(values)
    results.put("render", f"{variant}-{gpus}gpu", values)
