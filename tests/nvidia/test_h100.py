"""8× H100 SXM through the real pynvml and the fake library: every family NVML gives,
values checked against the scenario's raw numbers converted by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_exporter.model import catalogue as c
from tests.fake_nvml import scenario as fake
from tests.helpers import find, parse, promtool_check_metrics, run_cli, value
from tests.nvidia import golden
from tests.nvidia.conftest import nvidia_only, running

GIB = 1024**3
BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")


@pytest.fixture(scope="module")
def h100_scrape(fake_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    with running(fake_lib, fake.h100x8(), tmp_path_factory.mktemp("h100")) as exp:
        return exp.scrape()


def test_every_gpu_reports_in_base_units(h100_scrape: str) -> None:
    s = parse(h100_scrape)
    for i in range(8):
        uuid = f"GPU-{i:08x}-1111-2222-3333-4444555566{i:02d}"
        dev = {"hw_id": uuid}
        one = find(s, "hw_gpu_up", **dev)
        assert len(one) == 1 and one[0].value == 1
        labels = one[0].labels
        assert labels["hw_name"] == "NVIDIA H100 80GB HBM3"
        assert labels["hw_vendor"] == "nvidia"
        assert labels["gpu_index"] == str(i)
        assert labels["gpu_pci_address"] == f"0000:{BUSES[i]}:00.0"  # from 00000000:18:00.0
        info = find(s, "hw_gpu_info", **dev)[0].labels
        assert info["hw_serial_number"] == f"165232300{i:04d}"
        assert info["hw_firmware_version"] == "96.00.89.00.01"
        assert info["hw_driver_version"] == "550.54.15"
        assert info["hw_model"] == "692-2G520-0200-000"

        def v(name: str, i: int = i, dev: dict[str, str] = dev, **labels: str) -> float:
            return value(s, name, **dev, **labels)

        assert v("hw_gpu_utilization_ratio", hw_gpu_task="general") == pytest.approx((80 + i) / 100)
        assert v("hw_gpu_utilization_ratio", hw_gpu_task="encoder") == 0.0
        assert v("hw_gpu_utilization_ratio", hw_gpu_task="decoder") == pytest.approx((5 + i) / 100)
        # v2: used excludes the 512 MiB the driver reserves
        assert v("hw_gpu_memory_usage_bytes") == (40 + i) * GIB
        assert v("hw_gpu_memory_limit_bytes") == 80 * GIB
        assert v("hw_gpu_memory_utilization_ratio") == pytest.approx((40 + i) / 80)
        assert v("hw_gpu_memory_controller_utilization_ratio") == pytest.approx((40 + i) / 100)
        assert v("hw_gpu_power_draw_watts") == pytest.approx(512.345 + i)  # 512345+1000i mW
        assert v("hw_gpu_power_limit_watts") == pytest.approx(700.0)  # 700000 mW
        assert v("hw_gpu_energy_consumed_joules_total") == pytest.approx(123456.789 + i / 1000)
        assert v("hw_gpu_temperature_celsius", sensor="die") == 50 + i
        assert v("hw_gpu_temperature_celsius", sensor="memory") == 60 + i
        assert v("hw_gpu_clock_hertz", hw_gpu_clock_domain="graphics") == 1980e6
        assert v("hw_gpu_clock_hertz", hw_gpu_clock_domain="sm") == 1980e6
        assert v("hw_gpu_clock_hertz", hw_gpu_clock_domain="memory") == 2619e6
        assert v("hw_gpu_clock_hertz", hw_gpu_clock_domain="video") == 1545e6
        assert v("hw_gpu_io_bytes_total", network_io_direction="receive") == 2_000_000_000 + i
        assert v("hw_gpu_io_bytes_total", network_io_direction="transmit") == 1_000_000_000 + i
        assert v("hw_errors_total", error_type="corrected", hw_type="gpu") == i
        assert v("hw_errors_total", error_type="uncorrected") == (1 if i == 3 else 0)
        assert v("hw_errors_total", error_type="pcie_replay") == 2 * i
        assert v("hw_errors_total", error_type="xid") == 0  # the listener runs: none yet
        assert not find(s, "hw_gpu_xid_errors_total", **dev)
        # H100 SXM boards are passively cooled: NVML has no fan, so no fan series.
        assert not find(s, "hw_gpu_fan_speed_ratio", **dev)
        active = {x.labels["reason"] for x in find(s, "hw_gpu_clock_throttle_active", **dev)
                  if x.value == 1}
        expected = {1: {"sw_power_cap"}, 2: {"hw_thermal", "sw_thermal"}}.get(i, set())
        assert active == expected
        assert len(find(s, "hw_gpu_clock_throttle_active", **dev)) == 9
        state = {2: "degraded", 3: "failed"}.get(i, "ok")
        states = {x.labels["hw_state"]: x.value for x in find(s, "hw_status", **dev)}
        assert states == {"ok": 0, "degraded": 0, "failed": 0, state: 1}
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1
    assert value(s, "gpu_exporter_feature_status", feature="nvidia", state="enabled") == 1


def test_promtool_and_golden(h100_scrape: str) -> None:
    promtool_check_metrics(h100_scrape)
    golden.check("h100x8", h100_scrape)


# Families of the spec NVML cannot give an H100 SXM: RPM is a hwmon reading (AMD/Intel);
# the board has no fan; XID counts and the last XID appear with the first event (tested
# elsewhere).
NOT_FROM_H100 = {c.HW_GPU_FAN_SPEED_RPM.name, c.HW_GPU_FAN_SPEED_RATIO.name,
                 c.HW_GPU_XID_ERRORS.name, c.HW_GPU_XID_LAST.name,
                 # older GPUs (page retirement) and vGPU guests only: tests/nvidia/test_recovery.py
                 c.HW_GPU_MEMORY_RETIRED_PAGES.name, c.HW_GPU_VGPU_LICENSE_STATE.name,
                 # device families of the processes collector (attribution, allocations)
                 c.HW_GPU_ENERGY_UNATTRIBUTED.name, c.K8S_GPU_ALLOCATION_INFO.name,
                 # a Gaudi's own NICs (NVIDIA's fabric is NVLink): tests/gaudi
                 c.HW_GPU_NIC_LINKS.name}


def test_dump_prints_every_nvidia_family(fake_lib: Path, tmp_path: Path) -> None:
    path = fake.h100x8().write(tmp_path / "gpus.scenario")
    res = run_cli(["dump", *nvidia_only()], env=fake.env(fake_lib, path))
    assert res.returncode == 0, res.stderr
    names = {x.name for x in parse(res.stdout)}
    device_families = {m.name for m in c.CATALOGUE if m.scope is c.Scope.DEVICE}
    missing = device_families - NOT_FROM_H100 - names
    assert not missing, f"dump lacks {sorted(missing)}"
    assert len(find(parse(res.stdout), "hw_gpu_up")) == 8
    promtool_check_metrics(res.stdout)
