"""A consumer card (what NVML does not give is absent, never 0) and a MIG-enabled GPU
(MIG instances are devices of their own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_nvml import scenario as fake
from tests.helpers import find, parse, promtool_check_metrics, value
from tests.nvidia import golden
from tests.nvidia.conftest import running

GIB = 1024**3


def test_consumer_card_lacks_what_geforce_lacks(fake_lib: Path, tmp_path: Path) -> None:
    with running(fake_lib, fake.rtx4080(), tmp_path) as exp:
        text = exp.scrape()
    s = parse(text)
    dev = {"hw_id": "GPU-4080aaaa-bbbb-cccc-dddd-eeeeffff0000"}
    assert value(s, "hw_gpu_up", **dev) == 1
    info = find(s, "hw_gpu_info", **dev)[0].labels
    assert "hw_serial_number" not in info  # NOT_SUPPORTED on GeForce: no empty label
    assert info["hw_firmware_version"] == "95.03.1E.00.8C"
    # absent, not 0
    assert not find(s, "hw_errors_total", error_type="corrected")
    assert not find(s, "hw_errors_total", error_type="uncorrected")
    assert not find(s, "hw_gpu_energy_consumed_joules_total")
    assert not find(s, "hw_gpu_io_bytes_total")
    assert not find(s, "hw_gpu_temperature_celsius", sensor="memory")
    assert not find(s, "hw_gpu_fan_speed_rpm")
    assert find(s, "hw_gpu_energy_consumed_joules_total") == []
    # what it has
    assert value(s, "hw_gpu_fan_speed_ratio", fan="0", **dev) == pytest.approx(0.30)
    assert value(s, "hw_gpu_fan_speed_ratio", fan="1", **dev) == pytest.approx(0.32)
    assert value(s, "hw_gpu_utilization_ratio", hw_gpu_task="encoder") == pytest.approx(0.30)
    assert value(s, "hw_gpu_power_draw_watts") == pytest.approx(35.12)
    assert value(s, "hw_gpu_memory_usage_bytes") == 2 * GIB
    assert value(s, "hw_gpu_temperature_celsius", sensor="die") == 41
    assert value(s, "hw_errors_total", error_type="pcie_replay") == 0
    assert value(s, "hw_gpu_clock_throttle_active", reason="gpu_idle") == 1
    assert value(s, "hw_status", hw_state="ok") == 1
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1
    promtool_check_metrics(text)
    golden.check("rtx4080", text)


def test_mig_instances_are_devices(fake_lib: Path, tmp_path: Path) -> None:
    with running(fake_lib, fake.mig_a100(), tmp_path) as exp:
        text = exp.scrape()
    s = parse(text)
    parent = "GPU-a100a100-0000-1111-2222-333344445555"
    up = find(s, "hw_gpu_up")
    assert len(up) == 4 and all(x.value == 1 for x in up)
    assert all(x.labels["gpu_index"] == "0" for x in up)  # instances share the index
    assert all(x.labels["gpu_pci_address"] == "0000:07:00.0" for x in up)
    migs = {x.labels["hw_id"]: x.labels for x in up if x.labels["hw_id"].startswith("MIG-")}
    assert len(migs) == 3
    profiles = sorted(lab["gpu_mig_profile"] for lab in migs.values())
    assert profiles == ["1g.5gb", "1g.5gb", "3g.20gb"]
    for hw_id, labels in migs.items():
        assert labels["hw_parent"] == parent
        assert labels["hw_name"] == "NVIDIA A100-SXM4-40GB"
        slot = int(hw_id[4:12], 16)
        assert value(s, "hw_gpu_memory_usage_bytes", hw_id=hw_id) == (slot + 1) * GIB
        limit = {0: 20, 1: 5, 2: 5}[slot] * GIB
        assert value(s, "hw_gpu_memory_limit_bytes", hw_id=hw_id) == limit
    # the parent reports its own values; NVML gives no utilization in MIG mode
    assert value(s, "hw_gpu_power_draw_watts", hw_id=parent) == pytest.approx(250.0)
    assert value(s, "hw_gpu_memory_usage_bytes", hw_id=parent) == 12 * GIB
    assert not find(s, "hw_gpu_utilization_ratio")
    assert "hw_parent" not in find(s, "hw_gpu_up", hw_id=parent)[0].labels
    promtool_check_metrics(text)
    golden.check("mig_a100", text)
