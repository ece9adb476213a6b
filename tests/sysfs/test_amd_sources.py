"""AMD files the captures lack but data-centre cards have (RAS counters, hwmon energy,
power1_input only, serial numbers), added to a capture the way the kernel writes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import find, value
from tests.sysfs.conftest import dump, gpu_series
from tests.sysfs.tree import FakeSysfs

A = "0000:0c:00.0"


def test_ras_counters_summed_over_blocks(sysfs: FakeSysfs, procfs: Path) -> None:
    dev = sysfs.add("rx6900xt", A, 0).device
    (dev / "ras").mkdir()
    (dev / "ras" / "umc_err_count").write_text("ue: 2\nce: 5\n")
    (dev / "ras" / "gfx_err_count").write_text("ue: 1\nce: 0\n")
    (dev / "ras" / "features").write_text("feature mask: 0x3\n")  # not a counter
    (dev / "pcie_replay_count").write_text("4\n")
    _, s = dump(sysfs.root, procfs)
    card = gpu_series(s, A)
    assert value(card, "hw_errors_total", error_type="uncorrected", hw_type="gpu") == 3
    assert value(card, "hw_errors_total", error_type="corrected", hw_type="gpu") == 5
    assert value(card, "hw_errors_total", error_type="pcie_replay", hw_type="gpu") == 4
    # uncorrected errors since the driver loaded: failed, as for NVIDIA
    assert value(card, "hw_status", hw_state="failed", hw_type="gpu") == 1
    assert value(card, "hw_status", hw_state="ok", hw_type="gpu") == 0


def test_hwmon_energy_preferred_and_power1_input(sysfs: FakeSysfs, procfs: Path) -> None:
    dev = sysfs.add("rx6900xt", A, 0).device
    mon = dev / "hwmon" / "hwmon5"
    (mon / "energy1_input").write_text("123456789\n")  # µJ
    (mon / "power1_average").unlink()  # newer ASICs only have power1_input
    (mon / "power1_input").write_text("241000000\n")
    (dev / "serial_number").write_text("0x5a3b00c1\n")
    _, s = dump(sysfs.root, procfs)
    card = gpu_series(s, A)
    assert value(card, "hw_gpu_energy_consumed_joules_total") == pytest.approx(123.456789)
    assert value(card, "hw_gpu_power_draw_watts") == pytest.approx(241.0)
    info = find(card, "hw_gpu_info")[0].labels
    assert info["hw_serial_number"] == "0x5a3b00c1"


def test_dpm_levels_when_hwmon_has_no_clocks(sysfs: FakeSysfs, procfs: Path) -> None:
    dev = sysfs.add("rx6900xt", A, 0).device
    mon = dev / "hwmon" / "hwmon5"
    for name in ("freq1_input", "freq1_label", "freq2_input", "freq2_label"):
        (mon / name).unlink()
    # pp_dpm_sclk of the capture: "0: 500Mhz *" ; pp_dpm_mclk: "3: 1000Mhz *";
    # an RDNA3-style deep-sleep line first must not confuse the parser
    (dev / "pp_dpm_sclk").write_text("S: 19Mhz \n0: 500Mhz \n1: 2660Mhz *\n")
    _, s = dump(sysfs.root, procfs)
    card = gpu_series(s, A)
    assert value(card, "hw_gpu_clock_hertz", hw_gpu_clock_domain="graphics") == 2660e6
    assert value(card, "hw_gpu_clock_hertz", hw_gpu_clock_domain="memory") == 1000e6


def test_unlabelled_temperature_is_left_out(sysfs: FakeSysfs, procfs: Path) -> None:
    dev = sysfs.add("rx6900xt", A, 0).device
    (dev / "hwmon" / "hwmon5" / "temp2_label").unlink()
    _, s = dump(sysfs.root, procfs)
    sensors = sorted(x.labels["sensor"] for x in gpu_series(s, A)
                     if x.name == "hw_gpu_temperature_celsius")
    assert sensors == ["edge", "memory"]  # no guess for the unlabelled channel
