"""Intel power draw, derived from the hwmon energy counter between two scrapes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.helpers import exporter, find, parse, value
from tests.sysfs.conftest import only_sysfs_collectors
from tests.sysfs.tree import FakeSysfs

ADDRESS = "0000:03:00.0"


def test_power_from_energy_between_scrapes(sysfs: FakeSysfs, procfs: Path) -> None:
    card = sysfs.add("a380", ADDRESS, 1)
    energy = card.device / "hwmon" / "hwmon1" / "energy1_input"
    start_uj = 25637161804  # the capture's counter
    with exporter(only_sysfs_collectors(sysfs.root, procfs)) as exp:
        t0 = time.monotonic()
        s = parse(exp.scrape())
        t1 = time.monotonic()
        assert not find(s, "hw_gpu_power_draw_watts")  # one reading: no interval yet
        assert value(s, "hw_gpu_energy_consumed_joules_total") == pytest.approx(
            start_uj / 1e6)
        time.sleep(1.0)
        energy.write_text(f"{start_uj + 30_000_000}\n")  # +30 J
        t2 = time.monotonic()
        s = parse(exp.scrape())
        t3 = time.monotonic()
        # the exporter's interval lies between (t2 - t1) and (t3 - t0)
        watts = value(s, "hw_gpu_power_draw_watts", gpu_pci_address=ADDRESS)
        assert 30 / (t3 - t0) <= watts <= 30 / (t2 - t1)
        # a counter that goes back (driver reload) gives no power, not a negative one
        energy.write_text("1000\n")
        s = parse(exp.scrape())
        assert not find(s, "hw_gpu_power_draw_watts")
        assert value(s, "hw_gpu_energy_consumed_joules_total") == pytest.approx(0.001)
