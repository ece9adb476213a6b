"""Each real card capture through the real CLI (`gpu-exporter dump`): every family its
files support, values computed here from the raw files, nothing for files it lacks."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tests.helpers import Series, promtool_check_metrics, value
from tests.sysfs.conftest import dump, families, gpu_series
from tests.sysfs.tree import FakeSysfs, raw, raw_text

ADDRESS = "0000:0c:00.0"
DEVICE_FAMILIES = {"hw_gpu_info", "hw_gpu_up", "hw_status"}
# The captures sit right below the host bridge here: their own link files are the link
# (tests/sysfs/test_pcie_links.py puts them below their switches).
PCIE_CURRENT = {"hw_gpu_pcie_current_link_width", "hw_gpu_pcie_current_link_transfers_per_second"}
PCIE = PCIE_CURRENT | {"hw_gpu_pcie_max_link_width", "hw_gpu_pcie_max_link_transfers_per_second"}


def num(card: str, path: str) -> int:
    return int(raw_text(card, path))


def info_labels(series: list[Series]) -> dict[str, str]:
    [info] = [x for x in series if x.name == "hw_gpu_info"]
    return info.labels


def one_card(sysfs: FakeSysfs, procfs: Path, card: str, number: int = 0
             ) -> tuple[str, list[Series]]:
    sysfs.add(card, ADDRESS, number)
    text, series = dump(sysfs.root, procfs)
    promtool_check_metrics(text)
    return text, gpu_series(series, ADDRESS)


def test_rx6900xt(sysfs: FakeSysfs, procfs: Path) -> None:
    c, mon = "rx6900xt", "device/hwmon/hwmon5"
    _, s = one_card(sysfs, procfs, c)
    assert families(s) == DEVICE_FAMILIES | {
        "hw_gpu_utilization_ratio", "hw_gpu_memory_usage_bytes", "hw_gpu_memory_limit_bytes",
        "hw_gpu_memory_utilization_ratio", "hw_gpu_memory_controller_utilization_ratio",
        "hw_gpu_power_draw_watts", "hw_gpu_power_limit_watts",
        "hw_gpu_energy_consumed_joules_total", "hw_gpu_temperature_celsius",
        "hw_gpu_fan_speed_ratio", "hw_gpu_fan_speed_rpm", "hw_gpu_clock_hertz",
        "hw_errors_total", *PCIE,
    }
    assert raw_text(c, "device/current_link_speed") == "16.0 GT/s PCIe"
    assert value(s, "hw_gpu_pcie_current_link_transfers_per_second") == 16e9
    assert value(s, "hw_gpu_pcie_max_link_width") == num(c, "device/max_link_width")
    assert "TOTAL_ERR_NONFATAL 0" in raw_text(c, "device/aer_dev_nonfatal")
    assert value(s, "hw_errors_total", error_type="pcie_nonfatal") == 0
    # identity: hw_id is unique_id; product_name is empty in this capture -> pci.ids name
    unique_id = raw_text(c, "device/unique_id")
    assert unique_id == "946d7e1ef9b172dd"
    info = info_labels(s)
    assert info["hw_id"] == unique_id
    assert info["hw_vendor"] == "amd"
    assert info["hw_firmware_version"] == "113-D4121EXT-CO1"
    assert "6900 XT" in info["hw_name"]
    assert "hw_serial_number" not in info  # no serial_number file
    assert value(s, "hw_gpu_up") == 1
    assert value(s, "hw_status", hw_state="ok", hw_type="gpu") == 1
    assert value(s, "hw_status", hw_state="failed", hw_type="gpu") == 0
    assert value(s, "hw_gpu_utilization_ratio", hw_gpu_task="general") == pytest.approx(
        num(c, "device/gpu_busy_percent") / 100)
    assert value(s, "hw_gpu_memory_usage_bytes") == num(c, "device/mem_info_vram_used")
    assert value(s, "hw_gpu_memory_limit_bytes") == num(c, "device/mem_info_vram_total")
    assert value(s, "hw_gpu_memory_utilization_ratio") == pytest.approx(
        668274688 / 17163091968)
    assert value(s, "hw_gpu_memory_controller_utilization_ratio") == 0.0
    assert value(s, "hw_gpu_power_draw_watts") == pytest.approx(36.0)  # 36000000 µW
    assert value(s, "hw_gpu_power_limit_watts") == pytest.approx(289.0)  # 289000000 µW
    assert value(s, "hw_gpu_temperature_celsius", sensor="edge") == 56.0
    assert value(s, "hw_gpu_temperature_celsius", sensor="junction") == 59.0
    assert value(s, "hw_gpu_temperature_celsius", sensor="memory") == 54.0
    assert raw_text(c, f"{mon}/temp3_label") == "mem"
    assert value(s, "hw_gpu_fan_speed_rpm", fan="0") == num(c, f"{mon}/fan1_input")
    assert value(s, "hw_gpu_fan_speed_ratio", fan="0") == num(c, f"{mon}/pwm1") / 255
    assert value(s, "hw_gpu_clock_hertz", hw_gpu_clock_domain="graphics") == 500e6
    assert value(s, "hw_gpu_clock_hertz", hw_gpu_clock_domain="memory") == 1000e6
    # video: pp_dpm_vclk's current level ("0: 0Mhz *"): the VCN clock is gated
    assert value(s, "hw_gpu_clock_hertz", hw_gpu_clock_domain="video") == 0.0
    assert value(s, "hw_errors_total", error_type="pcie_replay", hw_type="gpu") == 0
    # energy: gpu_metrics header 0x0078 bytes, format 1, content 3; u64 at offset 24 in
    # units of 2^-16 J
    blob = raw(c, "device/gpu_metrics")
    assert struct.unpack_from("<HBB", blob) == (120, 1, 3)
    accumulator = int.from_bytes(blob[24:32], "little")
    assert accumulator == 0x010DF422
    assert value(s, "hw_gpu_energy_consumed_joules_total") == pytest.approx(
        accumulator / 65536)


def test_vega56(sysfs: FakeSysfs, procfs: Path) -> None:
    c = "vega56"
    _, s = one_card(sysfs, procfs, c, number=1)
    # No gpu_metrics, no mem_busy_percent, no unique_id: those families are absent.
    assert families(s) == DEVICE_FAMILIES | {
        "hw_gpu_utilization_ratio", "hw_gpu_memory_usage_bytes", "hw_gpu_memory_limit_bytes",
        "hw_gpu_memory_utilization_ratio", "hw_gpu_power_draw_watts",
        "hw_gpu_power_limit_watts", "hw_gpu_temperature_celsius", "hw_gpu_fan_speed_ratio",
        "hw_gpu_fan_speed_rpm", "hw_gpu_clock_hertz", "hw_errors_total", *PCIE,
    }
    info = info_labels(s)
    assert info["hw_id"] == ADDRESS  # no unique_id file
    assert "hw_serial_number" not in info  # serial_number is empty in this capture
    assert value(s, "hw_gpu_utilization_ratio", hw_gpu_task="general") == 0.0
    assert value(s, "hw_gpu_memory_usage_bytes") == 16613376
    assert value(s, "hw_gpu_memory_limit_bytes") == 8573157376
    assert value(s, "hw_gpu_power_draw_watts") == 8.0
    assert value(s, "hw_gpu_power_limit_watts") == 260.0
    assert value(s, "hw_gpu_temperature_celsius", sensor="memory") == 39.0
    assert value(s, "hw_gpu_fan_speed_rpm", fan="0") == 5
    assert value(s, "hw_gpu_clock_hertz", hw_gpu_clock_domain="graphics") == 26e6
    assert value(s, "hw_gpu_clock_hertz", hw_gpu_clock_domain="memory") == 167e6
    # no pp_dpm_vclk on this card: no video clock
    assert not [x for x in s if x.labels.get("hw_gpu_clock_domain") == "video"]


def test_phoenix_apu(sysfs: FakeSysfs, procfs: Path) -> None:
    c, mon = "phoenix", "device/hwmon/hwmon6"
    _, s = one_card(sysfs, procfs, c, number=1)
    # APU: no power1_cap, no fan, no pcie_replay_count, gpu_metrics 2.1 has no energy
    assert families(s) == DEVICE_FAMILIES | {
        "hw_gpu_utilization_ratio", "hw_gpu_memory_usage_bytes", "hw_gpu_memory_limit_bytes",
        "hw_gpu_memory_utilization_ratio", "hw_gpu_power_draw_watts",
        "hw_gpu_temperature_celsius", "hw_gpu_clock_hertz", *PCIE,
    }
    assert struct.unpack_from("<HBB", raw(c, "device/gpu_metrics")) == (120, 2, 1)
    info = info_labels(s)
    assert info["hw_id"] == ADDRESS  # unique_id exists but is empty
    # power1_average wins over power1_input
    assert value(s, "hw_gpu_power_draw_watts") == pytest.approx(
        num(c, f"{mon}/power1_average") / 1e6)
    assert value(s, "hw_gpu_memory_limit_bytes") == 4294967296
    assert [x.labels["sensor"] for x in s if x.name == "hw_gpu_temperature_celsius"] == ["edge"]
    assert value(s, "hw_gpu_temperature_celsius", sensor="edge") == 25.0
    # graphics from freq1_input (sclk, Hz); memory and video from pp_dpm_* current level
    assert value(s, "hw_gpu_clock_hertz", hw_gpu_clock_domain="graphics") == 800e6
    assert value(s, "hw_gpu_clock_hertz", hw_gpu_clock_domain="memory") == 400e6
    assert value(s, "hw_gpu_clock_hertz", hw_gpu_clock_domain="video") == 800e6


def test_a380_i915(sysfs: FakeSysfs, procfs: Path) -> None:
    c, mon = "a380", "device/hwmon/hwmon1"
    _, s = one_card(sysfs, procfs, c, number=1)
    # one scrape: no power draw yet (derived between scrapes), no fdinfo client: no
    # utilization; i915 has no VRAM files
    assert families(s) == DEVICE_FAMILIES | {
        "hw_gpu_power_limit_watts", "hw_gpu_energy_consumed_joules_total",
        "hw_gpu_temperature_celsius", "hw_gpu_fan_speed_rpm", "hw_gpu_clock_hertz",
        *PCIE_CURRENT,  # the capture has no max_link_* files
    }
    info = info_labels(s)
    assert info["hw_id"] == ADDRESS
    assert info["hw_vendor"] == "intel"
    assert info["hw_name"] == "Intel DG2 [Arc A380]"
    assert value(s, "hw_status", hw_state="ok") == 1
    assert value(s, "hw_gpu_energy_consumed_joules_total") == pytest.approx(
        num(c, f"{mon}/energy1_input") / 1e6)
    assert value(s, "hw_gpu_power_limit_watts") == num(c, f"{mon}/power1_max") / 1e6
    assert value(s, "hw_gpu_temperature_celsius", sensor="die") == 55.0
    assert value(s, "hw_gpu_fan_speed_rpm", fan="0") == 0
    assert value(s, "hw_gpu_clock_hertz", hw_gpu_clock_domain="graphics") == (
        num(c, "gt_act_freq_mhz") * 1e6)


def test_b580_xe(sysfs: FakeSysfs, procfs: Path) -> None:
    c, mon = "b580", "device/hwmon/hwmon2"
    _, s = one_card(sysfs, procfs, c, number=1)
    assert families(s) == DEVICE_FAMILIES | {
        "hw_gpu_power_limit_watts", "hw_gpu_energy_consumed_joules_total",
        "hw_gpu_temperature_celsius", "hw_gpu_fan_speed_ratio", "hw_gpu_fan_speed_rpm",
        "hw_gpu_clock_hertz", *PCIE,
    }
    # energy: the channel labelled "card" (energy1), not "pkg" (energy2)
    assert raw_text(c, f"{mon}/energy1_label") == "card"
    assert value(s, "hw_gpu_energy_consumed_joules_total") == pytest.approx(
        num(c, f"{mon}/energy1_input") / 1e6)
    assert value(s, "hw_gpu_power_limit_watts") == num(c, f"{mon}/power1_cap") / 1e6
    assert value(s, "hw_gpu_temperature_celsius", sensor="die") == 54.0  # temp2 "pkg"
    assert value(s, "hw_gpu_temperature_celsius", sensor="memory") == 56.0  # temp3 "vram"
    assert value(s, "hw_gpu_fan_speed_rpm", fan="1") == 1235
    assert value(s, "hw_gpu_fan_speed_ratio", fan="0") == pytest.approx(1116 / 2160)
    assert value(s, "hw_gpu_clock_hertz", hw_gpu_clock_domain="graphics") == 0.0
    assert value(s, "hw_gpu_clock_hertz", hw_gpu_clock_domain="video") == 0.0


def test_nvidia_capture_is_left_to_nvml(sysfs: FakeSysfs, procfs: Path) -> None:
    """The RTX 4080 is discovered as a GPU, but neither sysfs collector reports it."""
    sysfs.add("rtx4080", ADDRESS, 0)
    res_text, series = dump(sysfs.root, procfs)
    assert not gpu_series(series, ADDRESS)
    assert "hw_gpu_up" not in res_text
