"""Files as real machines have them: padded, missing, unreadable, garbage, and cards
that leave and arrive while the exporter runs."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import (
    EXPORTER,
    Series,
    eventually,
    exporter,
    find,
    parse,
    promtool_check_metrics,
    run_as_nobody,
    value,
    world_readable_dir,
)
from tests.sysfs.conftest import dump, gpu_series, only_sysfs_collectors
from tests.sysfs.tree import FakeSysfs, raw_text

A = "0000:0c:00.0"  # rx6900xt
B = "0000:0b:00.0"  # vega56


def two_cards(sysfs: FakeSysfs) -> tuple[Path, Path]:
    a = sysfs.add("rx6900xt", A, 0).device
    b = sysfs.add("vega56", B, 1).device
    return a, b


def success(series: list, collector: str = "amd") -> float:  # type: ignore[type-arg]
    return value(series, "gpu_exporter_collector_success", collector=collector)


def test_nul_padding_and_newline(sysfs: FakeSysfs, procfs: Path) -> None:
    a, _ = two_cards(sysfs)
    (a / "gpu_busy_percent").write_bytes(b"42\n" + b"\0" * 4093)
    (a / "mem_busy_percent").write_bytes(b"7" + b"\0" * 100)
    _, s = dump(sysfs.root, procfs)
    assert value(s, "hw_gpu_utilization_ratio", gpu_pci_address=A) == pytest.approx(0.42)
    assert value(s, "hw_gpu_memory_controller_utilization_ratio",
                 gpu_pci_address=A) == pytest.approx(0.07)
    assert success(s) == 1


def test_missing_file_is_absent_not_zero(sysfs: FakeSysfs, procfs: Path) -> None:
    a, _ = two_cards(sysfs)
    (a / "mem_info_vram_used").unlink()
    _, s = dump(sysfs.root, procfs)
    card = gpu_series(s, A)
    assert not find(card, "hw_gpu_memory_usage_bytes")
    assert not find(card, "hw_gpu_memory_utilization_ratio")  # needs the usage
    assert value(card, "hw_gpu_memory_limit_bytes") == 17163091968
    assert value(s, "hw_gpu_memory_usage_bytes", gpu_pci_address=B) == 16613376
    assert success(s) == 1  # a file the card lacks is not a failure


@pytest.mark.parametrize("content,family,labels", [
    (b"abc\n", "hw_gpu_memory_usage_bytes", {}),
    (b"-5000\n", "hw_gpu_temperature_celsius", {"sensor": "edge"}),
    (b"99999999999999999999999999\n", "hw_gpu_power_draw_watts", {}),
    (b"250\n", "hw_gpu_utilization_ratio", {}),  # a percentage over 100
    (b"0x10\n", "hw_gpu_memory_limit_bytes", {}),
])
def test_garbage_is_absent_and_reported(
    sysfs: FakeSysfs, procfs: Path, content: bytes, family: str, labels: dict[str, str]
) -> None:
    a, _ = two_cards(sysfs)
    target = {
        "hw_gpu_memory_usage_bytes": "mem_info_vram_used",
        "hw_gpu_temperature_celsius": "hwmon/hwmon5/temp1_input",
        "hw_gpu_power_draw_watts": "hwmon/hwmon5/power1_average",
        "hw_gpu_utilization_ratio": "gpu_busy_percent",
        "hw_gpu_memory_limit_bytes": "mem_info_vram_total",
    }[family]
    (a / target).write_bytes(content)
    res = subprocess.run(
        [EXPORTER, "dump", *only_sysfs_collectors(sysfs.root, procfs)],
        capture_output=True, text=True, timeout=60)
    assert res.returncode == 0
    s = parse(res.stdout)
    assert not find(gpu_series(s, A), family, **labels)
    assert find(gpu_series(s, B), family, **labels)  # the other card is untouched
    assert value(s, "hw_gpu_up", gpu_pci_address=A) == 1  # the card still answered
    assert success(s) == 0
    assert target.split("/")[-1] in res.stderr  # logged, with the file named
    promtool_check_metrics(res.stdout)


def test_fifo_and_directory_instead_of_a_file(sysfs: FakeSysfs, procfs: Path) -> None:
    """A FIFO would block a plain open() forever; a directory fails read(). Both are
    'not readable': absent, and the scrape returns at once."""
    a, _ = two_cards(sysfs)
    (a / "gpu_busy_percent").unlink()
    os.mkfifo(a / "gpu_busy_percent")
    (a / "mem_info_vram_used").unlink()
    (a / "mem_info_vram_used").mkdir()
    started = time.monotonic()
    _, s = dump(sysfs.root, procfs, "--scrape.timeout=20")
    assert time.monotonic() - started < 15
    card = gpu_series(s, A)
    assert not find(card, "hw_gpu_utilization_ratio")
    assert not find(card, "hw_gpu_memory_usage_bytes")
    assert value(card, "hw_gpu_memory_limit_bytes") == 17163091968
    assert value(card, "hw_gpu_up") == 1


@pytest.fixture
def world_readable_tree() -> Iterator[FakeSysfs]:
    with world_readable_dir("gpu-exporter-sysfs-") as root:
        yield FakeSysfs(root / "sys")


def test_permission_denied(world_readable_tree: FakeSysfs) -> None:
    """Root reads any file, so the exporter runs as `nobody` (setpriv) over files made
    unreadable (mode 000), as amdgpu's root-only files are to a non-root exporter."""
    sysfs = world_readable_tree
    a, _ = two_cards(sysfs)
    procfs = sysfs.root.parent / "proc"
    procfs.mkdir()
    os.chmod(sysfs.root.parent, 0o755)
    for name in ("mem_info_vram_used", "hwmon/hwmon5/power1_average"):
        os.chmod(a / name, 0)
    res = run_as_nobody(["dump", *only_sysfs_collectors(sysfs.root, procfs)])
    assert res.returncode == 0, res.stderr
    s = parse(res.stdout)
    card = gpu_series(s, A)
    assert not find(card, "hw_gpu_memory_usage_bytes")
    assert not find(card, "hw_gpu_power_draw_watts")
    assert value(card, "hw_gpu_memory_limit_bytes") == 17163091968
    assert value(s, "hw_gpu_power_draw_watts", gpu_pci_address=B) == 8.0
    assert success(s) == 1  # unreadable is "not reported", not garbage


def scrape(exp: object) -> list:  # type: ignore[type-arg]
    return parse(exp.scrape())  # type: ignore[attr-defined]


def test_card_removed_between_discovery_and_read(sysfs: FakeSysfs, procfs: Path) -> None:
    two_cards(sysfs)
    args = [*only_sysfs_collectors(sysfs.root, procfs),
            "--discovery.interval=3600", "--discovery.grace-period=3600"]
    with exporter(args) as exp:
        s = scrape(exp)
        assert value(s, "hw_gpu_up", gpu_pci_address=A) == 1
        sysfs.remove(B)  # discovery (hourly) still lists it
        s = scrape(exp)
        lost = gpu_series(s, B)
        assert value(lost, "hw_gpu_up") == 0
        assert value(lost, "hw_gpu_info") == 1  # still known, same identity
        assert value(lost, "hw_status", hw_state="failed") == 1
        assert {x.name for x in lost} == {"hw_gpu_info", "hw_gpu_up", "hw_status"}
        assert value(s, "hw_gpu_up", gpu_pci_address=A) == 1
        assert value(s, "hw_gpu_memory_usage_bytes", gpu_pci_address=A) == 668274688
        assert value(s, "gpu_exporter_collector_success", collector="amd") == 1
        promtool_check_metrics(exp.scrape())


def test_vanished_card_dropped_after_grace(sysfs: FakeSysfs, procfs: Path) -> None:
    two_cards(sysfs)
    a_id = "946d7e1ef9b172dd"
    args = [*only_sysfs_collectors(sysfs.root, procfs),
            "--discovery.interval=0.2", "--discovery.grace-period=2"]
    with exporter(args) as exp:
        assert value(scrape(exp), "hw_gpu_up", hw_id=a_id) == 1
        sysfs.remove(A)
        removed = time.monotonic()
        s = scrape(exp)
        # hw_id stays the unique_id it had, though the file is gone
        assert value(s, "hw_gpu_up", hw_id=a_id, gpu_pci_address=A) == 0
        while time.monotonic() - removed < 1.5:  # within the grace period
            assert value(scrape(exp), "hw_gpu_up", hw_id=a_id) == 0
            time.sleep(0.3)
        eventually(lambda: not find(scrape(exp), "hw_gpu_up", hw_id=a_id), 10,
                   "card dropped", interval=0.2)
        assert time.monotonic() - removed >= 2.0
        assert value(scrape(exp), "hw_gpu_up", gpu_pci_address=B) == 1


def test_card_added_after_start(sysfs: FakeSysfs, procfs: Path) -> None:
    """An AMD card joins AMD cards: seen at the next rediscovery. The first Intel card
    of a host starts the (until then unavailable) intel collector: seen at the next
    start retry. Both intervals are 1 s here."""
    sysfs.add("vega56", B, 1)
    args = [*only_sysfs_collectors(sysfs.root, procfs), "--discovery.interval=1",
            "--collector.retry-interval=1"]
    with exporter(args) as exp:
        s = scrape(exp)
        assert not find(s, "hw_gpu_up", gpu_pci_address="0000:03:00.0")
        assert value(s, "hw_gpu_up", gpu_pci_address=B) == 1
        sysfs.add("a380", "0000:03:00.0", 12)
        sysfs.add("rx6900xt", A, 10)

        def both_seen() -> list[Series]:
            s = scrape(exp)
            return s if find(s, "hw_gpu_up", gpu_pci_address="0000:03:00.0") and find(
                s, "hw_gpu_up", gpu_pci_address=A) else []

        s = eventually(both_seen, 1.0 + 2.0, "new cards seen within 1 interval",
                       interval=0.1)
        assert value(s, "hw_gpu_up", gpu_pci_address="0000:03:00.0", hw_vendor="intel") == 1
        assert value(s, "gpu_exporter_feature_status", feature="intel", state="enabled") == 1
        # gpu_index: AMD by PCI address (0b before 0c), then Intel
        assert value(s, "hw_gpu_up", gpu_pci_address=B, gpu_index="0") == 1
        assert value(s, "hw_gpu_up", gpu_pci_address=A, gpu_index="1") == 1
        assert value(s, "hw_gpu_up", gpu_pci_address="0000:03:00.0", gpu_index="2") == 1


def test_bad_discovery_flag_is_a_config_error(sysfs: FakeSysfs, procfs: Path) -> None:
    res = subprocess.run(
        [EXPORTER, "dump", *only_sysfs_collectors(sysfs.root, procfs),
         "--discovery.interval=-1"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert "discovery.interval" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_no_cards_is_unavailable_not_failed(sysfs: FakeSysfs, procfs: Path) -> None:
    _, s = dump(sysfs.root, procfs)
    assert value(s, "gpu_exporter_feature_status", feature="amd", state="unavailable") == 1
    # Unavailable is told by its feature state; it claims no success (and no failure).
    assert not find(s, "gpu_exporter_collector_success", collector="amd")
    assert not find(s, "hw_gpu_up")


def test_two_cards_with_one_unique_id_are_both_visible_and_reported(
        sysfs: FakeSysfs, procfs: Path) -> None:
    """Two boards of one capture: the same unique_id on two PCI addresses."""
    sysfs.add("rx6900xt", "0000:0b:00.0", 0)
    sysfs.add("rx6900xt", "0000:0c:00.0", 1)
    text, s = dump(sysfs.root, procfs)
    promtool_check_metrics(text)  # no duplicate series
    unique_id = raw_text("rx6900xt", "device/unique_id")
    up = find(s, "hw_gpu_up")
    assert sorted((x.labels["hw_id"], x.value) for x in up) == [
        (f"{unique_id}@0000:0b:00.0", 1), (f"{unique_id}@0000:0c:00.0", 1)]
    assert len(find(s, "hw_gpu_power_draw_watts")) == 2
    assert success(s) == 0
