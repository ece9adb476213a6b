"""Benchmark 1: a full scrape against its floor, side by side in one run.

Exporter: the exposition the exporter serves by default (every collector on its workers,
label joins, self-metrics, rendering with gpu_exporter/scrape/render.py, which reuses the label
text of the previous scrape). Floor: the NVML calls that very scrape made,
replayed straight through pynvml, plus `generate_latest` of the families it produced,
pre-built. The two alternate round by round (floor, exporter, floor, ...), so drift on
a shared machine hits both alike.

Scrapes come GPM's minimum window apart, as a real scraper's do: every scrape, and the
recorded one, takes its GPM samples (closer ones serve the last GPM values, which would
leave GPM's calls out of both sides). Both sides' rounds follow such a pause, so both
start as cold as a scrape every 15 s does.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest

from gpu_exporter.collectors.processes import ProcessesCollector
from gpu_exporter.scrape.render import TextRenderer
from gpu_exporter.sources.nvml.gpm import MIN_WINDOW_SECONDS
from tests.bench import fleet, floor, procstat
from tests.bench.conftest import Results
from tests.bench.stats import percentile
from tests.helpers import find, parse

PROCESSES = 200
KERNEL_SERIES = 2000
# Seconds of measurement per case (both sides together), within these round limits.
BUDGET_SECONDS, MIN_ROUNDS, MAX_ROUNDS = 8.0, 30, 400


def rounds_for(one_pair_seconds: float) -> int:
    return int(min(MAX_ROUNDS, max(MIN_ROUNDS, BUDGET_SECONDS / one_pair_seconds)))


@pytest.mark.parametrize("call_delay_us", [0, 100])
@pytest.mark.parametrize("gpus", [1, 8, 64])
def test_scrape_vs_floor(benchmark: Any, results: Results, tmp_path: Path, gpus: int,
                         call_delay_us: int) -> None:
    sc = fleet.scenario(gpus, PROCESSES, call_delay_us)
    with fleet.in_process(sc, tmp_path, KERNEL_SERIES) as (exporter, registry):
        renderer = TextRenderer()

        def serve() -> bytes:
            return renderer.render(registry)

        serve()  # first scrape: per-process state, caches
        time.sleep(MIN_WINDOW_SECONDS)
        with floor.recording_nvml() as rec:
            families = list(exporter.collect())
        prebuilt = floor.prebuilt_registry(families)
        assert rec.by_function().get("nvmlGpmSampleGet") == gpus  # GPM in both sides

        # The node is what it claims: every GPU up, every process reported, and the
        # floor renders the same exposition the exporter does.
        text = serve().decode()
        series = parse(text)
        assert [s.value for s in find(series, "hw_gpu_up")] == [1.0] * gpus
        assert len(find(series, "process_gpu_memory_usage_bytes")) == PROCESSES
        assert len(find(series, "gpu_kernel_launch_calls_total")) == KERNEL_SERIES
        floor_text = floor.floor_scrape(rec.calls, prebuilt).decode()
        assert len(parse(floor_text)) == len(series)

        floor_times: list[float] = []

        def run_floor() -> None:
            time.sleep(MIN_WINDOW_SECONDS)
            floor_times.append(floor.timed(lambda: floor.floor_scrape(rec.calls, prebuilt)))
            time.sleep(MIN_WINDOW_SECONDS)

        warm = []
        for _ in range(3):
            time.sleep(MIN_WINDOW_SECONDS)
            warm.append(floor.timed(serve))
        run_floor()
        rounds = rounds_for(min(warm) + floor_times[-1])
        floor_times.clear()
        benchmark.group = f"scrape {gpus} GPU, {call_delay_us} us/call"
        busy0, own0, wall0 = (procstat.system_busy_seconds(), procstat.self_cpu_seconds(),
                              time.monotonic())
        benchmark.pedantic(serve, setup=run_floor,
                           rounds=rounds, iterations=1)
        # CPUs' worth of other processes' work meanwhile: what the tails compete with.
        other_load = ((procstat.system_busy_seconds() - busy0)
                      - (procstat.self_cpu_seconds() - own0)) / (time.monotonic() - wall0)
        exporter_times = list(benchmark.stats.stats.data)

    values = {
        "gpus": gpus, "call_delay_us": call_delay_us, "processes": PROCESSES,
        "kernel_series": KERNEL_SERIES,
        "series": len(series), "nvml_calls": len(rec.calls), "rounds": rounds,
        "exporter_p50": percentile(exporter_times, 50),
        "exporter_p99": percentile(exporter_times, 99),
        "floor_p50": percentile(floor_times, 50), "floor_p99": percentile(floor_times, 99),
        "nvml_calls_by_function": rec.by_function(),
        "other_load_cpus": other_load,
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    values["ratio_p50"] = values["exporter_p50"] / values["floor_p50"]
    values["ratio_p99"] = values["exporter_p99"] / values["floor_p99"]
    benchmark.extra_info.update({k: v for k, v in values.items()
                                 if k != "nvml_calls_by_function"})
    results.put("scrape_vs_floor", f"{gpus}gpu-{call_delay_us}us", values)


def test_breakdown(benchmark: Any, results: Results, tmp_path: Path) -> None:
    """The measured cause of the gap: each part of the 8-GPU scrape (200 processes, 2,000
    kernel-name series) timed alone, round
    by round next to the whole scrape and the floor."""
    from gpu_exporter.collectors.base import Sink
    from gpu_exporter.readers.procfs.procinfo import ProcessTable

    sc = fleet.scenario(8, PROCESSES, 0)
    pids = [pid for d in sc.devices for _, pid, *_ in d.processes]
    with fleet.in_process(sc, tmp_path, KERNEL_SERIES) as (exporter, registry):
        generate_latest(registry)
        time.sleep(MIN_WINDOW_SECONDS)
        with floor.recording_nvml() as rec:
            families = list(exporter.collect())
        prebuilt = floor.prebuilt_registry(families)
        collectors = exporter.collectors  # as the exporter runs them
        nvidia, ebpf = collectors["nvidia"], collectors["ebpf"]
        processes = collectors["processes"]
        assert isinstance(processes, ProcessesCollector)
        table = ProcessTable("/proc")
        sinks = {n: Sink(n, time.monotonic() + 60) for n in collectors}
        for n, s in sinks.items():
            collectors[n].collect(s)
        ok = dict.fromkeys(sinks, True)
        took = dict.fromkeys(sinks, 0.001)
        parts: dict[str, Any] = {
            "nvidia_collect": lambda: nvidia.collect(Sink("nvidia", time.monotonic() + 60)),
            "processes_collect": lambda: processes.collect(
                Sink("processes", time.monotonic() + 60)),
            "ebpf_collect": lambda: ebpf.collect(Sink("ebpf", time.monotonic() + 60)),
            "processes_proc_lookups": lambda: table.lookup_many(pids),
            "processes_nvml": lambda: _nvml_processes(processes),
            "merge": lambda: exporter.merge(sinks, ok, took),
            "render": lambda: generate_latest(prebuilt),
            "floor_nvml": lambda: floor.replay(rec.calls),
        }
        times: dict[str, list[float]] = {k: [] for k in parts}

        def run_parts() -> None:
            # nvidia_collect, and the whole scrape after the parts, take GPM samples
            time.sleep(MIN_WINDOW_SECONDS)
            for k, fn in parts.items():
                times[k].append(floor.timed(fn))
            time.sleep(MIN_WINDOW_SECONDS)

        benchmark.group = "breakdown: 8 GPUs, 200 processes, 0 us/call"
        benchmark.pedantic(lambda: generate_latest(registry), setup=run_parts, rounds=150,
                           iterations=1)
        total = list(benchmark.stats.stats.data)
    values: dict[str, Any] = {k: percentile(v, 50) for k, v in times.items()}
    values["exporter_scrape"] = percentile(total, 50)
    values["floor_render"] = values["render"]
    values["floor_total"] = values["floor_nvml"] + values["render"]
    values["orchestration"] = values["exporter_scrape"] - (
        values["nvidia_collect"] + values["processes_collect"] + values["ebpf_collect"]
        + values["merge"]
        + values["render"])
    benchmark.extra_info.update(values)
    results.put("breakdown", "8gpu-200proc-0us", values)


def _nvml_processes(processes: ProcessesCollector) -> None:
    """The processes collector's NVML part alone: every GPU's process calls (lists and
    utilization samples), one round of the NVML stack's lanes, as a scrape reads them."""
    from gpu_exporter.collectors.inputs import ScrapeInputs
    from gpu_exporter.sources.nvml import stack as nvml_stack

    stack = nvml_stack.attach(processes.settings)  # the one the collector holds
    try:
        lists = ScrapeInputs().nvml_processes(stack, time.monotonic() + 60)
        assert len(lists.results) == len(lists.devices)
    finally:
        nvml_stack.detach(stack)
