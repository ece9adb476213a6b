"""Whole reader records of every real capture, procfs style: what discovery and the
vendor's reader make of a capture (the PciGpu, the identity, the reading, the problems)
is compared with the expected record in tests/golden/sysfs/<capture>.json, every field.

Regenerate with `UPDATE_GOLDEN=1 .venv/bin/pytest tests/sysfs/test_golden_records.py`
and review the diff against the raw files. Each test also checks a few values against
the raw files themselves, so a regenerated golden cannot quietly accept a wrong parse.
Device names come from tests/fixtures/pci.ids (an excerpt of Debian's database), not
the host's, which changes with its version.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.readers.file_values import Problems
from gpu_exporter.readers.sysfs import amd, intel, pci
from tests.helpers import check_golden
from tests.sysfs.tree import CAPTURES, FIXTURES, FakeSysfs, raw, raw_text

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "golden" / "sysfs"
ADDRESS = "0000:0c:00.0"


def parsed_record(name: str, root: Path) -> dict[str, Any]:
    tree = FakeSysfs(root)
    tree.add(name, ADDRESS, int(CAPTURES[name][1][4:]))
    [gpu] = pci.discover(tree.root).values()
    problems = Problems()
    record: dict[str, Any] = {"pci": {
        k: (os.path.relpath(v, tree.root) if isinstance(v, Path) else v)
        for k, v in dataclasses.asdict(gpu).items()}}
    if gpu.vendor == "amd":
        ident = amd.identity(gpu, tree.root)
        reading = amd.AmdReader().read(gpu, ident, problems)
    elif gpu.vendor == "intel":
        ident = intel.identity(gpu, tree.root)
        reading = intel.IntelReader().read(gpu, ident, problems)
    else:
        return record  # NVIDIA: PCI discovery only, the rest comes from NVML
    record["reading"] = dataclasses.asdict(reading)
    record["problems"] = [message for _, message in problems.items]
    return record


@pytest.fixture
def record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
           ) -> dict[str, Any]:
    monkeypatch.setattr(pci, "PCI_IDS_PATHS", (str(FIXTURES.parent / "pci.ids"),))
    name = request.param
    out = parsed_record(name, tmp_path / "sys")
    check_golden(GOLDEN_DIR / f"{name}.json", json.dumps(out, indent=1, sort_keys=True) + "\n",
                 "parsed record")
    return out


def num(card: str, path: str) -> int:
    return int(raw_text(card, path))


@pytest.mark.parametrize("record", ["rx6900xt"], indirect=True)
def test_rx6900xt_record(record: dict[str, Any]) -> None:
    c, mon = "rx6900xt", "device/hwmon/hwmon5"
    r = record["reading"]
    assert record["pci"]["device_id"] == 0x73BF  # uevent PCI_ID=1002:73BF (no device file)
    assert r["identity"]["hw_id"] == raw_text(c, "device/unique_id")
    assert r["identity"]["name"] == "AMD Navi 21 [Radeon RX 6800/6800 XT / 6900 XT]"
    assert r["memory_usage_bytes"] == num(c, "device/mem_info_vram_used")
    assert r["memory_limit_bytes"] == num(c, "device/mem_info_vram_total")
    assert r["power_draw_watts"] == num(c, f"{mon}/power1_average") / 1e6
    assert r["temperature_celsius"]["memory"] == num(c, f"{mon}/temp3_input") / 1000
    assert r["clock_hertz"]["graphics"] == num(c, f"{mon}/freq1_input")
    blob = raw(c, "device/gpu_metrics")
    assert struct.unpack_from("<HBB", blob) == (0x78, 1, 3)
    assert r["energy_consumed_joules"] == struct.unpack_from("<Q", blob, 24)[0] / 65536
    assert record["problems"] == []


@pytest.mark.parametrize("record", ["vega56"], indirect=True)
def test_vega56_record(record: dict[str, Any]) -> None:
    c, mon = "vega56", "device/hwmon/hwmon4"
    r = record["reading"]
    assert r["utilization_ratio"]["general"] == num(c, "device/gpu_busy_percent") / 100
    assert r["fan_speed_ratio"]["0"] == num(c, f"{mon}/pwm1") / num(c, f"{mon}/pwm1_max")
    assert r["power_limit_watts"] == num(c, f"{mon}/power1_cap") / 1e6
    assert r["identity"]["firmware_version"] == raw_text(c, "device/vbios_version")
    assert record["problems"] == []


@pytest.mark.parametrize("record", ["phoenix"], indirect=True)
def test_phoenix_record(record: dict[str, Any]) -> None:
    c = "phoenix"
    r = record["reading"]
    # An APU: gpu_metrics format 2 has no energy accumulator, and hwmon has no energy.
    assert struct.unpack_from("<HBB", raw(c, "device/gpu_metrics"))[1] == 2
    assert r["energy_consumed_joules"] is None
    assert r["memory_limit_bytes"] == num(c, "device/mem_info_vram_total")
    assert r["temperature_celsius"] == {
        "edge": num(c, "device/hwmon/hwmon6/temp1_input") / 1000}
    assert record["problems"] == []


@pytest.mark.parametrize("record", ["a380"], indirect=True)
def test_a380_record(record: dict[str, Any]) -> None:
    c, mon = "a380", "device/hwmon/hwmon1"
    r = record["reading"]
    assert record["pci"]["driver"] == "i915"
    assert r["energy_consumed_joules"] == num(c, f"{mon}/energy1_input") / 1e6
    assert r["power_draw_watts"] is None  # derived from two reads; this is the first
    assert r["clock_hertz"]["graphics"] == num(c, "gt_act_freq_mhz") * 1e6
    assert r["temperature_celsius"] == {"die": num(c, f"{mon}/temp1_input") / 1000}
    assert r["identity"]["hw_id"] == ADDRESS
    assert record["problems"] == []


@pytest.mark.parametrize("record", ["b580"], indirect=True)
def test_b580_record(record: dict[str, Any]) -> None:
    c, mon = "b580", "device/hwmon/hwmon2"
    r = record["reading"]
    assert record["pci"]["driver"] == "xe"
    # the `card` channel, not `pkg` (energy2)
    assert raw_text(c, f"{mon}/energy1_label") == "card"
    assert r["energy_consumed_joules"] == num(c, f"{mon}/energy1_input") / 1e6
    assert r["power_limit_watts"] == num(c, f"{mon}/power1_cap") / 1e6
    assert r["clock_hertz"]["graphics"] == num(c, "device/tile0/gt0/freq0/act_freq") * 1e6
    assert r["memory_limit_bytes"] is None  # no tile0/physical_vram_size_bytes here
    assert r["fan_speed_ratio"]["1"] == num(c, f"{mon}/fan2_input") / num(c, f"{mon}/fan2_max")
    assert raw_text(c, f"{mon}/temp3_label") == "vram"
    assert r["temperature_celsius"]["memory"] == num(c, f"{mon}/temp3_input") / 1000
    assert r["identity"]["name"] == "Intel GPU 8086:e20b"  # not in the pci.ids excerpt
    assert record["problems"] == []


@pytest.mark.parametrize("record", ["rtx4080"], indirect=True)
def test_rtx4080_record(record: dict[str, Any]) -> None:
    assert record["pci"]["vendor"] == "nvidia"
    assert record["pci"]["driver"] == "nvidia"
    assert record["pci"]["card"] == "card1"
    assert "reading" not in record
