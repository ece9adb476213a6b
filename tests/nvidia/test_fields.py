"""Per-field fallback: a field the field-values batch cannot give (NOT_SUPPORTED in its
entry) while its own NVML function answers is read through that function, once per
scrape, and what works is remembered per device (no retry storm)."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from gpu_exporter.sources.nvml import devices, values
from tests.bench.floor import recording_nvml
from tests.fake_nvml import scenario as fake
from tests.helpers import parse, value
from tests.nvidia.conftest import running
from tests.nvidia.test_failures import uuid

ECC_SBE, ECC_DBE = pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL
ENERGY = pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
REPLAY = pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER
MEMORY_TEMP = pynvml.NVML_FI_DEV_MEMORY_TEMP


def test_energy_ecc_and_replays_the_batch_does_not_support_come_from_their_own_functions(
    fake_lib: Path, tmp_path: Path
) -> None:
    sc = fake.h100x8()
    for d in sc.devices:
        for fid in (ECC_SBE, ECC_DBE, ENERGY, REPLAY):
            d.field_errors[fid] = "NOT_SUPPORTED"
    with running(fake_lib, sc, tmp_path) as exp:
        for _ in range(2):
            s = parse(exp.scrape())
    for i in range(8):
        dev = {"hw_id": uuid(i)}
        assert value(s, "hw_gpu_energy_consumed_joules_total", **dev) == pytest.approx(
            123456.789 + i / 1000)
        assert value(s, "hw_errors_total", error_type="corrected", **dev) == i
        assert value(s, "hw_errors_total", error_type="uncorrected", **dev) == (i == 3)
        assert value(s, "hw_errors_total", error_type="pcie_replay", **dev) == 2 * i
    # GPU 3's uncorrected error, read through nvmlDeviceGetTotalEccErrors, still fails it
    assert value(s, "hw_status", hw_id=uuid(3), hw_state="failed") == 1
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1


def test_what_each_field_answers_is_remembered_per_device(tmp_path: Path) -> None:
    sc = fake.h100x8()
    sc.devices = sc.devices[:2]
    d = sc.devices[0]
    for fid in (ENERGY, REPLAY):
        d.field_errors[fid] = "NOT_SUPPORTED"
    del d.values["pcie_replay"]  # nor does its own function give it: absent for good
    del d.values["temp_memory"]  # a field without a fallback, not supported
    fake.load_in_process(sc.write(tmp_path / "two.scenario"))
    pynvml.nvmlInit()
    try:
        gpu0, gpu1 = (devices.discover(i, None, None, {}) for i in range(2))
        first = values.read(gpu0).readings[0]
        with recording_nvml() as rec:
            again = [values.read(gpu0).readings[0] for _ in range(3)]
            values.read(gpu1)
    finally:
        pynvml.nvmlShutdown()
    assert first.energy_consumed_joules == pytest.approx(123456.789)
    assert "pcie_replay" not in first.errors and "memory" not in first.temperature_celsius
    assert again == [first] * 3
    # the field ids asked for (each request is a (fieldId, scopeId) pair)
    batches = [[f[0] for f in c.args[1]] for c in rec.calls
               if c.fn.__name__ == "nvmlDeviceGetFieldValues"]
    assert len(batches) == 4
    # GPU 0 no longer asks the batch for what it cannot give; GPU 1 asks for everything.
    assert all(not {ENERGY, REPLAY, MEMORY_TEMP} & set(b) for b in batches[:3])
    assert {ENERGY, REPLAY, MEMORY_TEMP} <= set(batches[3])
    calls = rec.by_function()
    assert calls["nvmlDeviceGetTotalEnergyConsumption"] == 3  # once per read of GPU 0
    assert "nvmlDeviceGetPcieReplayCounter" not in calls  # answered NOT_SUPPORTED once
    # (an H100 retires no pages: row remapping replaced page retirement; nor is it on a
    # superchip module)
    no_retirement = {"retired_pages_corrected", "retired_pages_uncorrected",
                     "module_power_watts"}
    assert gpu0.fields.absent.keys() == {"pcie_replays", "memory_temperature_celsius",
                                         *no_retirement}
    assert gpu1.fields.absent.keys() == no_retirement and not gpu1.fields.singles


def test_power_draw_rides_the_batch_where_the_driver_has_the_average_field(
    tmp_path: Path
) -> None:
    """nvmlDeviceGetPowerUsage is the 1 s average (NVML_FI_DEV_POWER_AVERAGE) on an H100
    and the instant power on a GA100, which has no average field: the H100 reads it in its
    batch (one NVML call fewer a scrape), the A100 through the function, same values."""
    sc = fake.h100x8()
    sc.devices = [sc.devices[0], fake.mig_a100().devices[0]]
    fake.load_in_process(sc.write(tmp_path / "mixed.scenario"))
    pynvml.nvmlInit()
    try:
        h100, a100 = (devices.discover(i, None, None, {}) for i in range(2))
        values.read(h100), values.read(a100)  # the plans learn what each device answers
        with recording_nvml() as h100_rec:
            h100_power = values.read(h100).readings[0].power_draw_watts
        with recording_nvml() as a100_rec:
            a100_power = values.read(a100).readings[0].power_draw_watts
    finally:
        pynvml.nvmlShutdown()
    assert h100_power == 512.345 and a100_power == 250.0
    assert "nvmlDeviceGetPowerUsage" not in h100_rec.by_function()
    assert a100_rec.by_function()["nvmlDeviceGetPowerUsage"] == 1
    # nothing is read twice in one read of a device
    for rec in (h100_rec, a100_rec):
        asked = [(c.fn.__name__, repr(c.args)) for c in rec.calls]
        assert len(asked) == len(set(asked)), asked
