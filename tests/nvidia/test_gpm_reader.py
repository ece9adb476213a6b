"""The GPM reader (`gpu_exporter/sources/nvml/gpm.py`) in this process, over the real nvidia-ml-py
bindings and the fake NVML's GPM (opaque samples, counters integrated between two sample
reads, a return code per metric): values and their conversion to ratios, the window
between samples, close reads, MIG GPU instances, unsupported GPUs, a driver that does not
know the bindings' structure version, per-metric errors and NaN."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gpu_exporter.sources.nvml import gpm
from gpu_exporter.sources.nvml.calls import DeviceLost
from tests.fake_nvml import scenario as fake

H100_0 = {"engine_active_ratio": 0.85, "sm_active_ratio": 0.60, "sm_occupancy_ratio": 0.30,
          "tensor_active_ratio": 0.40, "dram_active_ratio": 0.50}
H100_0_PIPES = {"tensor_hmma": 0.35, "tensor_imma": 0.0425, "tensor_dfma": 0.0,
                "tensor_dmma": 0.005, "fp64": 0.02, "fp32": 0.20, "fp16": 0.05,
                "integer": 0.10}


class Clock:
    """The reader's clock, injected: the time is what the test sets, so a window between
    two samples is exactly as long as the test says, with no waiting. (The fake NVML's
    ratios do not depend on the window's length: its counters integrate a constant
    percentage over whatever time passed.)"""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def set(self, now: float) -> None:
        self.now = now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def nvml(tmp_path: Path) -> Iterator[Path]:
    """The fake loaded in this process; the test writes its scenario to the path."""
    path = tmp_path / "gpm.scenario"
    fake.Scenario(devices=[fake.h100(0)]).write(path)
    fake.load_in_process(path)
    pynvml.nvmlInit()
    try:
        yield path
    finally:
        pynvml.nvmlShutdown()


def device(sc: fake.Scenario, path: Path, index: int = 0,
           migs: tuple[tuple[str, int | None], ...] = ()) -> tuple[gpm.GpmDevice, Any]:
    sc.write(path)
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    return gpm.GpmDevice(handle, sc.devices[index].uuid, migs), handle


def pipes_of_these_bindings() -> dict[str, float]:
    """The pipes an H100 reports through the bindings this test runs with: those whose
    metric id they define (DMMA came with nvidia-ml-py 13.6xx)."""
    return {p: v for p, v in H100_0_PIPES.items() if p in gpm.metric_ids()}


def scalars(reading: gpm.GpmReading) -> dict[str, float | None]:
    return {name: getattr(reading, name) for name in H100_0}


def test_values_are_ratios_averaged_over_the_window_between_samples(nvml: Path) -> None:
    sc = fake.Scenario(devices=[fake.h100(0)])
    dev, _ = device(sc, nvml)
    clock = Clock()
    dev.start(clock)
    assert dev.availability.state == "enabled"
    clock.advance(0.2)
    (series,) = dev.read(clock)
    assert series.device == sc.devices[0].uuid and series.gpu_instance_id is None
    r = series.reading
    assert scalars(r) == pytest.approx(H100_0, abs=1e-12)
    assert dict(r.pipe_active_ratio) == pytest.approx(pipes_of_these_bindings(), abs=1e-12)
    assert r.window_seconds == pytest.approx(0.2)


def test_a_window_shorter_than_100ms_serves_the_last_values(nvml: Path) -> None:
    sc = fake.Scenario(devices=[fake.h100(0)])
    dev, _ = device(sc, nvml)
    clock = Clock(1000.0)
    dev.start(clock)
    clock.set(1000.05)  # a scrape 50 ms after start: no window yet, nothing to serve
    assert dev.read(clock) == ()
    clock.set(1000.15)
    (first,) = dev.read(clock)
    assert first.reading.sm_active_ratio == pytest.approx(0.60)
    assert first.reading.window_seconds == pytest.approx(0.15)
    # The GPU changes; a second scraper 40 ms later gets the same values, not a new window.
    sc.devices[0].gpm[fake.GPM_SM_UTIL] = 20
    sc.write()
    clock.set(1000.19)
    (again,) = dev.read(clock)
    assert again.reading is first.reading
    clock.set(1000.40)
    (later,) = dev.read(clock)
    assert later.reading.sm_active_ratio == pytest.approx(0.20)
    assert later.reading.window_seconds == pytest.approx(0.25)


def test_each_metric_is_checked_on_its_own(nvml: Path) -> None:
    sc = fake.Scenario(devices=[fake.h100(0)])
    d = sc.devices[0]
    d.gpm_errors[fake.GPM_ANY_TENSOR_UTIL] = "UNKNOWN"  # an error on one metric
    d.gpm[fake.GPM_SM_OCCUPANCY] = "nan"  # NaN from the driver
    del d.gpm[fake.GPM_FP16_UTIL]  # the driver has no such metric: NOT_SUPPORTED
    dev, _ = device(sc, nvml)
    clock = Clock()
    dev.start(clock)
    clock.advance(0.12)
    failures: list[tuple[str, str]] = []
    (series,) = dev.read(clock, failures)
    r = series.reading
    # The unexpected error is a failure (collector_success 0); NaN and a metric the
    # driver lacks are not.
    assert [k for k, _ in failures] == [f"{d.uuid}:gpm:the GPU:tensor_active_ratio"]
    assert "Unknown Error" in failures[0][1]
    assert r.tensor_active_ratio is None
    assert r.sm_occupancy_ratio is None
    assert "fp16" not in r.pipe_active_ratio
    assert r.sm_active_ratio == pytest.approx(0.60)
    assert r.pipe_active_ratio["tensor_hmma"] == pytest.approx(0.35)
    assert dev.availability.state == "enabled"
    # The passing error and the NaN clear; a metric the driver said it lacks is not asked
    # for again (the fake would now answer it).
    d.gpm_errors.clear()
    d.gpm[fake.GPM_SM_OCCUPANCY] = 30
    d.gpm[fake.GPM_FP16_UTIL] = 5
    sc.write()
    clock.advance(0.12)
    (series,) = dev.read(clock)
    assert series.reading.tensor_active_ratio == pytest.approx(0.40)
    assert series.reading.sm_occupancy_ratio == pytest.approx(0.30)
    assert "fp16" not in series.reading.pipe_active_ratio


def test_only_the_first_window_is_waited_for_even_when_no_metric_answers(
        nvml: Path) -> None:
    # A GPU whose driver lacks every metric the bindings define: its first window has no
    # values, and none is asked for after it; scrapes closer together than 100 ms must
    # not wait for a window again (the collector sleeps until first_values_at()).
    sc = fake.Scenario(devices=[fake.h100(0)])
    sc.devices[0].gpm.clear()
    dev, _ = device(sc, nvml)
    clock = Clock(1000.0)
    dev.start(clock)
    assert dev.first_values_at() == pytest.approx(1000.1)
    clock.set(1000.15)
    (first,) = dev.read(clock)
    assert (scalars(first.reading), dict(first.reading.pipe_active_ratio)) == (
        dict.fromkeys(H100_0), {})
    assert dev.first_values_at() is None
    clock.set(1000.3)
    assert dev.read(clock) == ()  # nothing left to ask for
    assert dev.first_values_at() is None


def test_a_gpu_without_gpm_is_disabled_with_the_reason(nvml: Path) -> None:
    sc = fake.Scenario(devices=[fake.h100(0)])
    del sc.devices[0].values["gpm_supported"]  # an A100: no GPM
    dev, _ = device(sc, nvml)
    dev.start(Clock())
    assert dev.availability.state == "disabled"
    assert "Hopper" in dev.availability.reason
    assert dev.read(Clock()) == ()


def test_a_driver_that_does_not_know_the_structure_version_is_unavailable(nvml: Path) -> None:
    sc = fake.Scenario(devices=[fake.h100(0)], gpm_version=2)
    dev, _ = device(sc, nvml)
    dev.start(Clock())
    assert dev.availability.state == "unavailable"
    assert "nvmlGpmQueryDeviceSupport" in dev.availability.reason
    assert "does not know the version of the GPM structures" in dev.availability.reason
    assert dev.availability.fix == gpm.FIX_BINDINGS
    assert dev.read(Clock()) == ()


def test_a_metrics_version_mismatch_after_support_stops_asking(nvml: Path) -> None:
    sc = fake.Scenario(devices=[fake.h100(0)])
    dev, _ = device(sc, nvml)
    clock = Clock()
    dev.start(clock)
    sc.gpm_version = 2  # e.g. the driver replaced under a running exporter
    sc.write()
    clock.advance(0.12)
    assert dev.read(clock) == ()
    assert dev.availability.state == "unavailable"
    assert "nvmlGpmQueryDeviceSupport" not in dev.availability.reason
    assert "nvmlGpmMetricsGet" in dev.availability.reason
    sc.gpm_version = None
    sc.write()
    clock.advance(0.12)
    assert dev.read(clock) == ()  # not asked again until NVML starts afresh


def test_an_error_on_the_sample_call_is_the_feature_state_until_it_clears(nvml: Path) -> None:
    sc = fake.Scenario(devices=[fake.h100(0)])
    dev, _ = device(sc, nvml)
    clock = Clock()
    dev.start(clock)
    sc.devices[0].errors["nvmlGpmSampleGet"] = "NO_PERMISSION"
    sc.write()
    clock.advance(0.12)
    assert dev.read(clock) == ()
    state = dev.availability
    assert state.state == "unavailable"
    assert "nvmlGpmSampleGet" in state.reason and state.fix == gpm.FIX_PROFILER
    del sc.devices[0].errors["nvmlGpmSampleGet"]
    sc.write()
    (series,) = dev.read(clock)  # the window runs from the last good sample
    assert series.reading.window_seconds == pytest.approx(0.12)
    assert dev.availability.state == "enabled"


def test_a_lost_gpu_raises_device_lost(nvml: Path) -> None:
    sc = fake.Scenario(devices=[fake.h100(0)])
    dev, _ = device(sc, nvml)
    clock = Clock()
    dev.start(clock)
    sc.lose(0)
    clock.advance(0.12)
    with pytest.raises(DeviceLost):
        dev.read(clock)


def test_mig_gpu_instances(nvml: Path) -> None:
    """GPU instance 1 has one compute instance: its values go on that MIG device. GPU
    instance 2 has two: one series set, on the parent with the instance id. GPU instance 5
    has none (no MIG device): nothing, although NVML would sample it."""
    sc = fake.mig_h100()
    parent = sc.devices[0]
    migs = tuple((m.uuid, m.gpu_instance_id) for m in parent.migs)
    dev, _ = device(sc, nvml, migs=migs)
    clock = Clock()
    dev.start(clock)
    clock.advance(0.12)
    got = {(s.device, s.gpu_instance_id): s.reading for s in dev.read(clock)}
    assert set(got) == {(parent.uuid, None), (parent.migs[0].uuid, None), (parent.uuid, 2)}
    assert got[(parent.uuid, None)].sm_active_ratio == pytest.approx(0.60)  # the whole GPU
    one = got[(parent.migs[0].uuid, None)]
    assert (one.engine_active_ratio, one.sm_active_ratio, one.tensor_active_ratio,
            one.dram_active_ratio) == pytest.approx((0.70, 0.55, 0.25, 0.33))
    assert one.sm_occupancy_ratio is None and not one.pipe_active_ratio  # not given
    two = got[(parent.uuid, 2)]
    assert (two.sm_active_ratio, two.tensor_active_ratio) == pytest.approx((0.80, 0.60))


def test_asks_only_for_metric_ids_the_bindings_define() -> None:
    ids = gpm.metric_ids()
    limit = pynvml.NVML_GPM_METRIC_MAX
    assert all(0 < i < limit for i in ids.values())
    assert set(ids) >= set(H100_0)  # in every release of the pinned range
    has_dmma = hasattr(pynvml, "NVML_GPM_METRIC_DMMA_TENSOR_UTIL")
    assert set(ids) - set(H100_0) == set(H100_0_PIPES) - (set() if has_dmma else
                                                           {"tensor_dmma"})
