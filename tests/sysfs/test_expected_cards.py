"""Every card bound to its driver is reported, readable or not; nothing else is; and
when there is none, `doctor` says why and what to do. Through the real exporter."""

from __future__ import annotations

import time
from pathlib import Path

from tests.helpers import (
    Series,
    eventually,
    exporter,
    find,
    parse,
    promtool_check_metrics,
    run_cli,
    value,
)
from tests.sysfs.conftest import dump, gpu_series, only_sysfs_collectors
from tests.sysfs.tree import FakeSysfs, raw_text

A = "0000:0a:00.0"  # rx6900xt (has a unique_id)
B = "0000:0b:00.0"  # vega56


def test_a_card_lost_before_start_is_down_with_its_address_and_a_later_index(
        sysfs: FakeSysfs, procfs: Path) -> None:
    sysfs.add("rx6900xt", A, 0)
    sysfs.add("vega56", B, 1)
    sysfs.lose_driver_files(A)  # bound to amdgpu, its files and DRM card gone
    text, s = dump(sysfs.root, procfs)
    promtool_check_metrics(text)
    lost = gpu_series(s, A)
    assert value(lost, "hw_gpu_up") == 0
    assert value(lost, "hw_status", hw_state="failed") == 1
    # Its unique_id is unknown: no hw_id at all, rather than its PCI address.
    assert lost and all("hw_id" not in x.labels for x in lost)
    # After the readable AMD card, though its PCI address comes first.
    assert {x.labels["gpu_index"] for x in lost} == {"1"}
    assert {x.labels["hw_vendor"] for x in lost} == {"amd"}
    assert value(s, "hw_gpu_up", gpu_pci_address=B, gpu_index="0") == 1
    assert value(s, "gpu_exporter_collector_success", collector="amd") == 1
    assert value(s, "gpu_exporter_feature_status", feature="amd", state="enabled") == 1


def test_a_card_lost_before_start_comes_back_at_the_retry_interval(
        sysfs: FakeSysfs, procfs: Path) -> None:
    sysfs.add("rx6900xt", A, 0)
    sysfs.add("vega56", B, 1)
    sysfs.lose_driver_files(A)
    unique_id = raw_text("rx6900xt", "device/unique_id")
    with exporter([*only_sysfs_collectors(sysfs.root, procfs),
                   "--collector.retry-interval=3"]) as exp:
        first = time.monotonic()
        assert value(parse(exp.scrape()), "hw_gpu_up", gpu_pci_address=A) == 0
        sysfs.mend_driver_files(A)
        # Not read again before the retry interval: still down.
        s = parse(exp.scrape())
        assert time.monotonic() - first < 2.5, "scrapes too slow for this check"
        assert value(s, "hw_gpu_up", gpu_pci_address=A) == 0
        assert not find(s, "hw_gpu_up", hw_id=unique_id)  # nor its identity read

        def back() -> list[Series]:
            s = parse(exp.scrape())
            return s if find(s, "hw_gpu_up", hw_id=unique_id, gpu_pci_address=A) else []

        s = eventually(back, 3 + 5 - (time.monotonic() - first), "the card back",
                       interval=0.2)
        assert time.monotonic() - first >= 2.9
        # Back in full, under its unique_id, and in PCI order with the other card.
        assert value(s, "hw_gpu_up", hw_id=unique_id, gpu_pci_address=A, gpu_index="0") == 1
        assert value(s, "hw_gpu_memory_usage_bytes", hw_id=unique_id) == 668274688
        assert value(s, "hw_gpu_up", gpu_pci_address=B, gpu_index="1") == 1
        assert not find(s, "hw_gpu_up", gpu_pci_address=A, gpu_index="1")


def test_an_intel_card_lost_before_start_keeps_its_address_as_hw_id(
        sysfs: FakeSysfs, procfs: Path) -> None:
    sysfs.add("a380", "0000:03:00.0", 1)
    sysfs.add("b580", "0000:04:00.0", 2)
    sysfs.lose_driver_files("0000:03:00.0")
    text, s = dump(sysfs.root, procfs)
    promtool_check_metrics(text)
    # Intel's hw_id is the PCI address, which the PCI device gives without the driver.
    assert value(s, "hw_gpu_up", hw_id="0000:03:00.0", gpu_pci_address="0000:03:00.0",
                 hw_vendor="intel", gpu_index="1") == 0
    assert value(s, "hw_gpu_up", gpu_pci_address="0000:04:00.0", gpu_index="0") == 1


def test_virtual_functions_and_cards_of_other_drivers_are_not_expected(
        sysfs: FakeSysfs, procfs: Path) -> None:
    sysfs.add("rx6900xt", "0000:0c:00.0", 0)
    sysfs.add_virtual_function("rx6900xt", "0000:0c:02.0", 1, physfn="0000:0c:00.0")
    sysfs.add("vega56", "0000:0d:00.0", 2)
    sysfs.bind("0000:0d:00.0", "vfio-pci")  # passed through to a VM
    _, s = dump(sysfs.root, procfs)
    assert [x.labels["gpu_pci_address"] for x in find(s, "hw_gpu_up")] == ["0000:0c:00.0"]
    res = run_cli(["doctor", *only_sysfs_collectors(sysfs.root, procfs)])
    assert res.returncode == 0, res.stderr
    [line] = [x for x in res.stdout.splitlines() if x.startswith("amd ")]
    assert "enabled" in line and "1 GPU(s): 0000:0c:00.0 (card0, amdgpu)" in line
    assert "0000:0c:02.0 (an SR-IOV virtual function)" in line
    assert "0000:0d:00.0 (bound to vfio-pci)" in line


def test_no_card_of_the_driver_says_which_driver_to_load(
        sysfs: FakeSysfs, procfs: Path) -> None:
    sysfs.add("vega56", B, 0)
    sysfs.bind(B, "vfio-pci")
    sysfs.add("a380", "0000:03:00.0", 1)
    sysfs.bind("0000:03:00.0", "")  # no driver bound
    _, s = dump(sysfs.root, procfs)
    assert not find(s, "hw_gpu_up")
    assert value(s, "gpu_exporter_feature_status", feature="amd", state="unavailable") == 1
    res = run_cli(["doctor", *only_sysfs_collectors(sysfs.root, procfs)])
    lines = res.stdout.splitlines()
    amd = lines.index(next(x for x in lines if x.startswith("amd ")))
    assert f"no AMD GPU bound to amdgpu: {B} (bound to vfio-pci)" in lines[amd]
    assert "fix: load the amdgpu kernel module (`modprobe amdgpu`)" in lines[amd + 1]
    intel = lines.index(next(x for x in lines if x.startswith("intel ")))
    assert "no Intel GPU bound to i915 or xe: 0000:03:00.0 (no driver bound)" in lines[intel]
    assert "`modprobe xe`" in lines[intel + 1]


def test_a_path_that_is_not_a_sysfs_says_to_pass_the_hosts(tmp_path: Path,
                                                           procfs: Path) -> None:
    empty = tmp_path / "not-sys"
    empty.mkdir()
    res = run_cli(["doctor", *only_sysfs_collectors(empty, procfs)])
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    for name in ("amd", "intel"):
        i = lines.index(next(x for x in lines if x.startswith(f"{name} ")))
        assert "unavailable" in lines[i] and f"{empty}/bus/pci/devices" in lines[i]
        assert "fix: pass --path.sysfs=<the host's /sys>" in lines[i + 1]


def test_no_gpu_of_the_vendor_at_all(sysfs: FakeSysfs, procfs: Path) -> None:
    sysfs.add("rtx4080", "0000:01:00.0", 0)
    res = run_cli(["doctor", *only_sysfs_collectors(sysfs.root, procfs)])
    lines = res.stdout.splitlines()
    amd = lines.index(next(x for x in lines if x.startswith("amd ")))
    assert "no AMD GPU (PCI vendor 0x1002" in lines[amd]
    assert "--no-collector.amd" in lines[amd + 1]
