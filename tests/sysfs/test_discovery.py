"""PCI discovery on fake /sys trees with the real link layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_exporter.readers.sysfs.pci import DeviceTracker, discover, normalize_pci_address
from tests.helpers import find, promtool_check_metrics
from tests.sysfs.conftest import dump
from tests.sysfs.tree import FakeSysfs


@pytest.mark.parametrize(("text", "expected"), [
    ("0000:0c:00.0", "0000:0c:00.0"),  # sysfs
    ("00000000:3B:00.0", "0000:3b:00.0"),  # NVML's bus id
    ("3b:00.1", "0000:3b:00.1"),  # a kubelet device id
    (" 0000:0C:00.0\n", "0000:0c:00.0"),  # a file's content
    ("10000:e1:00.0", "10000:e1:00.0"),  # a VMD domain, as sysfs names it
    ("0000:0c:00.8", None), ("0000:0c:00", None), ("card0", None), ("", None),
    ("0000:0c:00.0x", None),
])
def test_one_pci_address_form_for_every_source(text: str, expected: str | None) -> None:
    assert normalize_pci_address(text) == expected


def test_every_vendor_keyed_by_address(sysfs: FakeSysfs) -> None:
    sysfs.add("rx6900xt", "0000:0c:00.0", 0)
    sysfs.add("a380", "0000:03:00.0", 1)
    sysfs.add("rtx4080", "0000:01:00.0", 2)
    sysfs.add_non_gpu("0000:0c:00.1", "0x1002", "0x040300")  # the card's HDMI audio
    sysfs.add_non_gpu("0000:05:00.0", "0x8086", "0x020000")  # an Intel NIC
    sysfs.add_non_gpu("0000:06:00.0", "0x15b3", "0x120000")  # an accelerator, other vendor
    found = discover(sysfs.root)
    assert list(found) == ["0000:01:00.0", "0000:03:00.0", "0000:0c:00.0"]
    assert [g.vendor for g in found.values()] == ["nvidia", "intel", "amd"]
    assert [g.card for g in found.values()] == ["card2", "card1", "card0"]
    assert [g.driver for g in found.values()] == ["nvidia", "i915", "amdgpu"]
    assert found["0000:0c:00.0"].class_code == 0x030000
    assert list(discover(sysfs.root, ["amd"])) == ["0000:0c:00.0"]


def test_accelerator_class_is_a_gpu(sysfs: FakeSysfs) -> None:
    device = sysfs.add_non_gpu("0000:c1:00.0", "0x1002", "0x120000")  # an MI300X
    assert (device / "class").read_text().strip() == "0x120000"
    assert list(discover(sysfs.root)) == ["0000:c1:00.0"]
    assert discover(sysfs.root)["0000:c1:00.0"].card is None  # no DRM card bound


def test_connectors_skipped_and_card12(sysfs: FakeSysfs) -> None:
    sysfs.add("vega56", "0000:0b:00.0", 12, connectors=("DP-1", "HDMI-A-1"))
    sysfs.add("rx6900xt", "0000:0c:00.0", 2, connectors=("DP-3",))
    names = sorted(p.name for p in (sysfs.root / "class" / "drm").iterdir())
    assert names == ["card12", "card12-DP-1", "card12-HDMI-A-1", "card2", "card2-DP-3"]
    found = discover(sysfs.root)
    assert found["0000:0b:00.0"].card == "card12"
    assert found["0000:0b:00.0"].card_number == 12
    assert found["0000:0c:00.0"].card == "card2"


def test_plain_device_folder_uses_uevent(sysfs: FakeSysfs) -> None:
    """The capture as is: class/drm/card1 a folder, `device` a plain folder, no
    bus/pci entry: the address is PCI_SLOT_NAME from device/uevent."""
    card = sysfs.add_plain("phoenix", 1)
    assert not (card / "device").is_symlink()
    found = discover(sysfs.root)
    assert list(found) == ["0000:64:00.0"]
    assert found["0000:64:00.0"].device_path == card / "device"
    assert found["0000:64:00.0"].driver == "amdgpu"


def test_plain_tree_through_the_cli(sysfs: FakeSysfs, procfs: Path) -> None:
    sysfs.add_plain("a380", 1)  # uevent: PCI_SLOT_NAME=0000:0b:00.0
    text, series = dump(sysfs.root, procfs)
    assert find(series, "hw_gpu_up", gpu_pci_address="0000:0b:00.0", hw_vendor="intel")
    # i915 clocks live in the card folder, found through class/drm/card1
    assert find(series, "hw_gpu_clock_hertz", hw_gpu_clock_domain="graphics")
    promtool_check_metrics(text)


def test_tracker_grace_period(sysfs: FakeSysfs) -> None:
    now = [100.0]
    sysfs.add("rx6900xt", "0000:0c:00.0", 0)
    sysfs.add("vega56", "0000:0b:00.0", 1)
    tracker = DeviceTracker(sysfs.root, ["amd"], interval_seconds=30, grace_seconds=60,
                            clock=lambda: now[0])
    assert [(t.gpu.pci_address, t.lost_since) for t in tracker.devices()] == [
        ("0000:0b:00.0", None), ("0000:0c:00.0", None)]
    sysfs.remove("0000:0b:00.0")
    now[0] = 110.0  # before the next rediscovery: still listed as present
    assert [t.lost_since for t in tracker.devices()] == [None, None]
    now[0] = 131.0  # rediscovered: lost since now
    assert [(t.gpu.pci_address, t.lost_since) for t in tracker.devices()] == [
        ("0000:0b:00.0", 131.0), ("0000:0c:00.0", None)]
    now[0] = 162.0  # 31 s lost: in the grace period
    assert len(tracker.devices()) == 2
    now[0] = 193.0  # 62 s lost: dropped
    assert [t.gpu.pci_address for t in tracker.devices()] == ["0000:0c:00.0"]
    sysfs.add("vega56", "0000:0b:00.0", 1)  # plugged in again
    now[0] = 224.0
    assert [(t.gpu.pci_address, t.lost_since) for t in tracker.devices()] == [
        ("0000:0b:00.0", None), ("0000:0c:00.0", None)]


def test_card_back_within_grace_is_present(sysfs: FakeSysfs) -> None:
    now = [0.0]
    sysfs.add("vega56", "0000:0b:00.0", 1)
    tracker = DeviceTracker(sysfs.root, ["amd"], 10, 100, clock=lambda: now[0])
    tracker.devices()
    tracker.mark_lost("0000:0b:00.0")  # a read failed
    assert tracker.devices()[0].lost_since == 0.0
    now[0] = 11.0  # rediscovery finds it: present again
    assert tracker.devices()[0].lost_since is None
