"""NVIDIA collect + render for 8 GPUs (`make bench`): the exporter's NVIDIA collector
alone, in process, against the fake NVML library with 0 and 100 µs per NVML call.

At 100 µs per call the per-GPU workers show: a scrape costs about one GPU's calls, not
eight GPUs' calls in a row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest

from gpu_exporter.collectors.nvidia import NvidiaCollector
from gpu_exporter.model.settings import Settings
from gpu_exporter.scrape.exporter import GpuExporterCollector, make_registry
from tests.fake_nvml import scenario as fake
from tests.helpers import find, parse


@pytest.mark.parametrize("call_delay_us", [0, 100])
def test_nvidia_collect_and_render_8_gpus(
    benchmark: Any, tmp_path: Path, call_delay_us: int
) -> None:
    sc = fake.h100x8()
    sc.call_delay_us = call_delay_us
    fake.load_in_process(sc.write(tmp_path / "h100x8.scenario"))
    settings = Settings(scrape_timeout_seconds=30.0, enabled_collectors=frozenset({"nvidia"}))
    exporter = GpuExporterCollector(settings, [NvidiaCollector])
    try:
        assert exporter.start()["nvidia"].state == "enabled"
        registry = make_registry(exporter)
        series = parse(generate_latest(registry).decode())
        assert [s.value for s in find(series, "hw_gpu_up")] == [1.0] * 8
        assert len(find(series, "hw_gpu_power_draw_watts")) == 8
        benchmark.group = f"nvidia collect+render, 8 GPUs, {call_delay_us} us/call"
        benchmark.extra_info.update({"gpus": 8, "call_delay_us": call_delay_us,
                                     "series": len(series)})
        benchmark(generate_latest, registry)
    finally:
        exporter.close()
