"""The card-to-slot PCIe link and the card's AER counters, read from fake /sys trees laid
out as real machines are: the real card captures below the root port of their slot and,
where the board has one, the card's own PCIe switch (tests/sysfs/tree.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_exporter.readers.file_values import Problems
from gpu_exporter.readers.sysfs import pcie
from tests.helpers import promtool_check_metrics, value
from tests.sysfs.conftest import dump, gpu_series
from tests.sysfs.tree import FakeSysfs, Port, card_switch, raw_text, root_port, set_aer

GEN4_X16 = ("16.0 GT/s PCIe", 16)


def _read(device: Path) -> tuple[pcie.PcieReading, Problems]:
    problems = Problems()
    return pcie.read(pcie.card_path(device), problems), problems


def _link(reading: pcie.PcieReading) -> tuple[float | None, int | None, float | None, int | None]:
    link = reading.link
    return (link.current_transfers_per_second, link.current_width_lanes,
            link.max_transfers_per_second, link.max_width_lanes)


def _arc_a380(sysfs: FakeSysfs) -> Path:
    """An Arc A380 (PCIe 4.0 x8) in the CPU's Gen5 x16 slot of an Alder Lake board: the
    root port is Intel's too, the card's DG2 switch sits between it and the GPU."""
    return sysfs.add("a380", "0000:0b:00.0", 1, ports=(
        root_port("0000:00:01.0", "8086:460d", "32.0 GT/s PCIe", 16, ("16.0 GT/s PCIe", 8)),
        *card_switch("dg2", "0000:09:00.0", "0000:0a:01.0", slot=("16.0 GT/s PCIe", 8),
                     inner=("2.5 GT/s PCIe", 1)),
    )).device


def test_a_card_with_its_own_switch_reports_the_slot_link_not_the_internal_one(
        sysfs: FakeSysfs) -> None:
    gpu = _arc_a380(sysfs)
    # what the GPU function itself says, and what node_exporter's pcidevice would show
    assert raw_text("a380", "device/current_link_speed") == "2.5 GT/s PCIe"
    assert raw_text("a380", "device/current_link_width") == "1"
    path = pcie.card_path(sysfs.root / "bus" / "pci" / "devices" / "0000:0b:00.0")
    ports = sysfs.root / "devices" / "pci0000:00" / "0000:00:01.0"
    assert path.functions == (ports / "0000:09:00.0", ports / "0000:09:00.0" / "0000:0a:01.0",
                              gpu.resolve())
    # the Intel root port above an Intel card is the slot, not part of the card
    assert path.slot == ports
    reading, problems = _read(gpu)
    assert _link(reading) == (16e9, 8, 16e9, 8)  # min(card Gen4 x8, slot Gen5 x16)
    assert not problems.items


def test_max_is_the_lower_end_behind_a_chipset_switch(sysfs: FakeSysfs) -> None:
    """An RX 6900 XT (Gen4 x16) in the x16-sized chipset slot of an X370 board, wired x4 at
    Gen2: the chipset's ports (AMD's, another vendor id than the card's) are the platform,
    the card's Navi 21 switch is the card."""
    gpu = sysfs.add("rx6900xt", "0000:0b:00.0", 0, ports=(
        root_port("0000:00:01.3", "1022:1453", "8.0 GT/s PCIe", 4, ("8.0 GT/s PCIe", 4)),
        Port("0000:01:00.2", "1022:43b0", "8.0 GT/s PCIe", 4, "8.0 GT/s PCIe", 4),
        Port("0000:02:04.0", "1022:43b4", "5.0 GT/s PCIe", 4, "5.0 GT/s PCIe", 4),
        *card_switch("navi21", "0000:09:00.0", "0000:0a:00.0", slot=("5.0 GT/s PCIe", 4),
                     inner=GEN4_X16),
    )).device
    path = pcie.card_path(gpu)
    assert [f.name for f in path.functions] == ["0000:09:00.0", "0000:0a:00.0", "0000:0b:00.0"]
    assert path.slot is not None and path.slot.name == "0000:02:04.0"
    reading, _ = _read(gpu)
    # the GPU function says 16 GT/s x16, and so does the card's upstream port's maximum
    assert raw_text("rx6900xt", "device/max_link_width") == "16"
    assert _link(reading) == (5e9, 4, 5e9, 4)


def test_amd_narrowing_the_link_at_idle_is_read_as_it_is(sysfs: FakeSysfs) -> None:
    """amdgpu drops the link to x1 at 2.5 GT/s when idle (pp_dpm_pcie level 0): current
    says so, max does not change (the alert waits for load before it calls it degraded)."""
    assert raw_text("rx6900xt", "device/pp_dpm_pcie").startswith("0: 2.5GT/s, x1")
    gpu = sysfs.add("rx6900xt", "0000:0c:00.0", 0, ports=(
        root_port("0000:00:03.1", "1022:1483", "16.0 GT/s PCIe", 16, ("2.5 GT/s PCIe", 1)),
        *card_switch("navi21", "0000:0a:00.0", "0000:0b:00.0", slot=("2.5 GT/s PCIe", 1),
                     inner=GEN4_X16),
    )).device
    reading, _ = _read(gpu)
    assert _link(reading) == (2.5e9, 1, 16e9, 16)


def test_a_card_without_a_switch_reports_its_own_link(sysfs: FakeSysfs) -> None:
    """A GeForce card sits right below the root port; its capture has no max_link_* files,
    so the slot's maximum is the only one known."""
    gpu = sysfs.add("rtx4080", "0000:09:00.0", 1, ports=(
        root_port("0000:00:01.1", "1022:1483", "16.0 GT/s PCIe", 16, ("5.0 GT/s PCIe", 16)),
    )).device
    path = pcie.card_path(gpu)
    assert path.functions == (gpu.resolve(),)
    reading, _ = _read(gpu)
    assert _link(reading) == (5e9, 16, 16e9, 16)


def test_a_device_right_under_the_host_bridge_has_one_end(sysfs: FakeSysfs) -> None:
    gpu = sysfs.add("b580", "0000:03:00.0", 1).device
    path = pcie.card_path(gpu)
    assert path.slot is None and path.functions == (gpu.resolve(),)
    reading, _ = _read(gpu)
    assert _link(reading) == (2.5e9, 1, 2.5e9, 1)  # the capture's own files


def test_a_capture_without_links_is_read_from_its_folder(sysfs: FakeSysfs) -> None:
    """`class/drm/cardN/device` a plain folder (some container mounts): no tree to walk."""
    card = sysfs.add_plain("vega56", 0)
    reading, _ = _read(card / "device")
    assert _link(reading) == (8e9, 16, 8e9, 16)
    assert reading.errors == {"pcie_correctable": 0, "pcie_nonfatal": 0, "pcie_fatal": 0}


def test_aer_counts_are_summed_over_the_cards_functions_only(sysfs: FakeSysfs) -> None:
    gpu = _arc_a380(sysfs)
    ports = sysfs.root / "devices" / "pci0000:00" / "0000:00:01.0"
    upstream, downstream = ports / "0000:09:00.0", ports / "0000:09:00.0" / "0000:0a:01.0"
    set_aer(upstream, "aer_dev_correctable", 7)  # bad lanes on the slot link
    set_aer(downstream, "aer_dev_nonfatal", 2, first=0)
    set_aer(gpu, "aer_dev_correctable", 1)  # the A380 capture has no AER files: now it has
    set_aer(ports, "aer_dev_fatal", 100)  # the root port's own errors are the host's
    reading, problems = _read(gpu)
    assert reading.errors == {"pcie_correctable": 8, "pcie_nonfatal": 2, "pcie_fatal": 0}
    assert not problems.items


def test_aer_of_the_real_captures(sysfs: FakeSysfs) -> None:
    gpu = sysfs.add("rx6900xt", "0000:0c:00.0", 0).device
    assert "TOTAL_ERR_COR 0" in raw_text("rx6900xt", "device/aer_dev_correctable")
    reading, _ = _read(gpu)
    assert reading.errors == {"pcie_correctable": 0, "pcie_nonfatal": 0, "pcie_fatal": 0}
    # a card without the AER capability (the A380 capture) has no counters: absent, not 0
    reading, _ = _read(sysfs.add("a380", "0000:0d:00.0", 1).device)
    assert reading.errors == {}


@pytest.mark.parametrize(("speed", "width", "want"), [
    ("8 GT/s", "8", (8e9, 8)),  # kernels before 4.19 print no decimals and no "PCIe"
    ("64.0 GT/s PCIe", "32", (64e9, 32)),
    ("Unknown", "0", (None, None)),  # link down
    ("Unknown speed", "63", (None, None)),  # D3cold: the registers read all ones
])
def test_every_kernel_format_and_the_unknowns(sysfs: FakeSysfs, speed: str, width: str,
                                              want: tuple[float | None, int | None]) -> None:
    gpu = sysfs.add("b580", "0000:03:00.0", 1).device
    (gpu / "current_link_speed").write_text(speed + "\n")
    (gpu / "current_link_width").write_text(width + "\n")
    reading, problems = _read(gpu)
    assert (reading.link.current_transfers_per_second, reading.link.current_width_lanes) == want
    assert not problems.items


def test_garbage_is_absent_and_reported(sysfs: FakeSysfs) -> None:
    gpu = _arc_a380(sysfs)
    upstream = sysfs.root / "devices" / "pci0000:00" / "0000:00:01.0" / "0000:09:00.0"
    (upstream / "current_link_speed").write_text("fast\n")
    (upstream / "current_link_width").write_text("x8\n")
    (upstream / "aer_dev_fatal").write_text("DLP 0\n")  # no total line
    reading, problems = _read(gpu)
    assert reading.link.current_transfers_per_second is None
    assert reading.link.current_width_lanes is None
    assert reading.link.max_width_lanes == 8  # the rest is still read
    assert "pcie_fatal" not in reading.errors  # a partial sum would look like a reset
    assert reading.errors["pcie_correctable"] == 0
    assert sorted(Path(key).name for key, _ in problems.items) == [
        "aer_dev_fatal", "current_link_speed", "current_link_width"]


def test_the_reader_walks_once_and_reads_the_link_every_time(sysfs: FakeSysfs) -> None:
    gpu = _arc_a380(sysfs)
    reader = pcie.PcieReader()
    assert reader.read("0000:0b:00.0", gpu, Problems()).link.current_width_lanes == 8
    upstream = sysfs.root / "devices" / "pci0000:00" / "0000:00:01.0" / "0000:09:00.0"
    (upstream / "current_link_width").write_text("4\n")  # retrained after an error
    assert reader.read("0000:0b:00.0", gpu, Problems()).link.current_width_lanes == 4


def test_every_vendor_reports_the_link_and_aer_through_the_cli(sysfs: FakeSysfs,
                                                               procfs: Path) -> None:
    """An RX 6900 XT that trained to x8 in its Gen4 x16 slot, with correctable errors on
    its switch, and an Arc A380 behind its DG2 switch: the families as scraped."""
    amd = sysfs.add("rx6900xt", "0000:2f:00.0", 0, ports=(
        root_port("0000:00:03.1", "1022:1483", "16.0 GT/s PCIe", 16, ("16.0 GT/s PCIe", 8)),
        *card_switch("navi21", "0000:2d:00.0", "0000:2e:00.0", slot=("16.0 GT/s PCIe", 8),
                     inner=GEN4_X16),
    )).device
    set_aer(amd.parent.parent, "aer_dev_correctable", 5)
    _arc_a380(sysfs)
    text, series = dump(sysfs.root, procfs)
    promtool_check_metrics(text)
    for address, want in (("0000:2f:00.0", (8, 16, 16e9, 16e9)),
                          ("0000:0b:00.0", (8, 8, 16e9, 16e9))):
        s = gpu_series(series, address)
        assert (value(s, "hw_gpu_pcie_current_link_width"),
                value(s, "hw_gpu_pcie_max_link_width"),
                value(s, "hw_gpu_pcie_current_link_transfers_per_second"),
                value(s, "hw_gpu_pcie_max_link_transfers_per_second")) == want, address
    s = gpu_series(series, "0000:2f:00.0")
    assert value(s, "hw_errors_total", error_type="pcie_correctable") == 5
    assert value(s, "hw_errors_total", error_type="pcie_fatal") == 0
    # the A380's functions have no AER capability in the capture; its switch ports do
    s = gpu_series(series, "0000:0b:00.0")
    assert value(s, "hw_errors_total", error_type="pcie_nonfatal") == 0
