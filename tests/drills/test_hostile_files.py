"""Files that would hang or bloat the exporter, put where the kernel's belong (a fake
procfs/sysfs tree in a tmp folder): a FIFO, a device, a sparse 1 GB file, a 200 MB mount
table, a folder the exporter's user may not open. Each makes one feature or value
unavailable with the reason; the exporter starts and answers, in bounded memory."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpu_exporter.collectors import REGISTRY
from tests.helpers import (
    EXPORTER,
    exporter,
    find,
    parse,
    run_as_nobody,
    run_cli,
    world_readable_dir,
)
from tests.sysfs.tree import FakeSysfs

HOST_ONLY = [f"--no-collector.{c.name}" for c in REGISTRY if c.name != "host"]
MEMINFO = ("MemTotal:       16384000 kB\nMemFree:         4096000 kB\n"
           "MemAvailable:    8192000 kB\nBuffers:          512000 kB\n"
           "Cached:          2048000 kB\nSReclaimable:           0 kB\n")
STAT = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 100 0 50 800 50 0 0 0 0 0\n"
DISKSTATS = "   8       0 sda 10 0 2048 5 20 0 4096 7 0 12 12 0 0 0 0 0 0\n"
# The peak RSS of an exporter reading a hostile file may exceed the one reading the
# kernel's sizes by this much at most (today's caps: 4 MiB of mounts, 64 KiB of meminfo).
PEAK_MARGIN_KIB = 48 * 1024


def _procfs(root: Path) -> Path:
    proc = root / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "stat").write_text(STAT)
    (proc / "meminfo").write_text(MEMINFO)
    (proc / "diskstats").write_text(DISKSTATS)
    (proc / "self" / "mounts").write_text(f"/dev/sda1 {root} ext4 rw 0 0\n")
    return proc


def _sparse(path: Path, size: int) -> None:
    path.unlink()
    with open(path, "wb") as f:
        f.truncate(size)


_PEAK = ("import resource, subprocess, sys\n"
         "r = subprocess.run(sys.argv[2:], capture_output=True, text=True, timeout=120)\n"
         "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN)"
         ".ru_maxrss))\n"
         "sys.stdout.write(r.stdout); sys.stderr.write(r.stderr); sys.exit(r.returncode)\n")


def _dump_with_peak(args: Sequence[str], tmp: Path) -> tuple[str, str, int]:
    """`gpu-exporter dump` (start, one scrape): its exposition, its log and its peak RSS
    in KiB, measured by a parent of its own (getrusage of its only child)."""
    peak = tmp / "peak"
    res = subprocess.run([sys.executable, "-c", _PEAK, str(peak), EXPORTER, "dump", *args],
                         capture_output=True, text=True, timeout=150)
    assert res.returncode == 0, res.stderr
    return res.stdout, res.stderr, int(peak.read_text())


def _host_states(text: str) -> dict[str, float]:
    return {s.labels["state"]: s.value for s in find(parse(text), "gpu_exporter_feature_status")
            if s.labels["feature"] == "host"}


def test_a_fifo_for_proc_stat_makes_host_unavailable_and_never_hangs_start_up(
        tmp_path: Path) -> None:
    proc = _procfs(tmp_path)
    (proc / "stat").unlink()
    os.mkfifo(proc / "stat")
    with exporter([*HOST_ONLY, f"--path.procfs={proc}"], start_timeout=20) as exp:
        text = exp.scrape(timeout=10)
        assert _host_states(text) == {"enabled": 0, "unavailable": 1, "disabled": 0}
        assert f"{proc}/stat is a FIFO, not a regular file" in exp.logs()
        assert not [s for s in parse(text) if s.name.startswith("system_")]


def test_a_sparse_1gb_meminfo_is_one_value_missing_with_the_reason(tmp_path: Path) -> None:
    proc = _procfs(tmp_path)
    args = [*HOST_ONLY, f"--path.procfs={proc}"]
    _, _, normal_peak = _dump_with_peak(args, tmp_path)
    _sparse(proc / "meminfo", 1 << 30)
    text, log, peak = _dump_with_peak(args, tmp_path)
    series = parse(text)
    assert not find(series, "system_memory_usage_bytes")
    assert find(series, "system_cpu_utilization_ratio")  # the rest keeps reporting
    assert find(series, "system_disk_io_bytes_total", system_device="sda")
    assert [s.value for s in find(series, "gpu_exporter_collector_success",
                                  collector="host")] == [0]
    assert f"{proc}/meminfo is larger than 65536 bytes (1073741824)" in log
    assert peak <= normal_peak + PEAK_MARGIN_KIB, (peak, normal_peak)
    # doctor names it from the start
    res = run_cli(["doctor", *args])
    assert res.returncode == 0, res.stderr
    [line] = [x for x in res.stdout.splitlines() if x.startswith("host ")]
    assert line.split()[1] == "enabled", line
    assert f"memory not read: {proc}/meminfo is larger than 65536 bytes" in line, line


def test_a_200mb_mount_table_is_refused_not_read(tmp_path: Path) -> None:
    proc = _procfs(tmp_path)
    args = [*HOST_ONLY, f"--path.procfs={proc}"]
    _, _, normal_peak = _dump_with_peak(args, tmp_path)
    # Real lines, not a sparse hole: each one a mount the reader would keep.
    line = f"/dev/sda1 {tmp_path} ext4 rw,relatime 0 0\n".encode()
    with open(proc / "self" / "mounts", "wb") as f:
        f.write(line * (200 * 1024 * 1024 // len(line)))
    text, log, peak = _dump_with_peak(args, tmp_path)
    series = parse(text)
    assert not find(series, "system_filesystem_usage_bytes")
    assert find(series, "system_memory_usage_bytes", system_memory_state="free")
    assert f"{proc}/self/mounts is larger than 4194304 bytes" in log
    assert peak <= normal_peak + PEAK_MARGIN_KIB, (peak, normal_peak)


def test_a_device_for_diskstats_is_not_opened(tmp_path: Path) -> None:
    """/dev/zero where diskstats should be: never opened, the disks missing, with why."""
    proc = _procfs(tmp_path)
    (proc / "diskstats").unlink()
    (proc / "diskstats").symlink_to("/dev/zero")
    text, log, _ = _dump_with_peak([*HOST_ONLY, f"--path.procfs={proc}"], tmp_path)
    assert not find(parse(text), "system_disk_io_bytes_total")
    assert f"{proc}/diskstats is a character device, not a regular file" in log


def test_a_card_folder_the_exporter_may_not_open_is_no_exit() -> None:
    """Run as `nobody` against a sysfs whose card0 folder is mode 000: the exporter
    starts and still reads the GPU through its PCI folder."""
    with world_readable_dir("hostile-sysfs-") as root:
        tree = FakeSysfs(root / "sys")
        tree.add("rx6900xt", "0000:0b:00.0", 0)
        (root / "proc").mkdir()
        card = root / "sys" / "devices" / "pci0000:00" / "0000:0b:00.0" / "drm" / "card0"
        os.chmod(card, 0)
        try:
            args = [*(f"--no-collector.{c.name}" for c in REGISTRY if c.name != "amd"),
                    f"--path.sysfs={root / 'sys'}", f"--path.procfs={root / 'proc'}"]
            res = run_as_nobody(["dump", *args])
            assert res.returncode == 0, res.stderr
            assert "Traceback" not in res.stderr and "PermissionError" not in res.stderr
            series = parse(res.stdout)
            assert [s.value for s in find(series, "hw_gpu_up",
                                          gpu_pci_address="0000:0b:00.0")] == [1]
            res = run_as_nobody(["doctor", *args])
            assert res.returncode == 0, res.stderr
        finally:
            os.chmod(card, 0o755)



@pytest.mark.parametrize(("capture", "collector"), [("rx6900xt", "amd"), ("b580", "intel")])
def test_a_pci_device_folder_the_exporter_may_not_open_reads_up_0(
        capture: str, collector: str) -> None:
    """Run as `nobody` against a sysfs whose PCI device folder of one GPU is mode 000
    (issue #32: the GPU vanished, and with it the only card, the collector went
    unavailable). It is known by its driver's bind link (bus/pci/drivers/<driver>/), reads
    `hw_gpu_up 0` by its PCI address with the reason as a failure; the other GPU beside it
    is read."""
    with world_readable_dir("hostile-sysfs-") as root:
        tree = FakeSysfs(root / "sys")
        closed = tree.add(capture, "0000:0b:00.0", 0).device
        tree.add(capture, "0000:0c:00.0", 1)
        (root / "proc").mkdir()
        os.chmod(closed, 0)
        try:
            args = [*(f"--no-collector.{c.name}" for c in REGISTRY if c.name != collector),
                    f"--path.sysfs={root / 'sys'}", f"--path.procfs={root / 'proc'}"]
            res = run_as_nobody(["dump", *args])
            assert res.returncode == 0, res.stderr
            assert "Traceback" not in res.stderr
            series = parse(res.stdout)
            up = {s.labels["gpu_pci_address"]: s.value for s in find(series, "hw_gpu_up")}
            assert up == {"0000:0b:00.0": 0, "0000:0c:00.0": 1}
            assert "0000:0b:00.0: permission denied" in res.stderr
            assert [s.value for s in find(series, "gpu_exporter_collector_success",
                                          collector=collector)] == [0]
            doctor = run_as_nobody(["doctor", *args])
            assert "0000:0b:00.0 (no DRM card" in doctor.stdout
            assert "cannot be read" in doctor.stdout, doctor.stdout
        finally:
            os.chmod(closed, 0o755)


def test_hostile_files_in_a_cards_folder_are_values_missing_with_the_reason(
        tmp_path: Path) -> None:
    """A FIFO (with a writer: it has data), a link to /dev/zero and a sparse 1 GB file
    where three of an AMD card's sysfs values are: those three values are missing and
    named with why, the card's other values are read."""
    tree = FakeSysfs(tmp_path / "sys")
    device = tree.add("rx6900xt", "0000:0b:00.0", 0).device
    (tmp_path / "proc").mkdir()
    busy = device / "gpu_busy_percent"
    [hwmon] = (device / "hwmon").iterdir()
    busy.unlink()
    os.mkfifo(busy)
    writer = os.open(busy, os.O_RDWR | os.O_NONBLOCK)
    (hwmon / "power1_average").unlink()
    (hwmon / "power1_average").symlink_to("/dev/zero")
    _sparse(hwmon / "temp1_input", 1 << 30)
    try:
        res = subprocess.run(
            [EXPORTER, "dump", *(f"--no-collector.{c.name}" for c in REGISTRY
                                 if c.name != "amd"),
             f"--path.sysfs={tmp_path / 'sys'}", f"--path.procfs={tmp_path / 'proc'}"],
            capture_output=True, text=True, timeout=60)
        os.write(writer, b"99\n")  # still unread: nobody read the FIFO
    finally:
        os.close(writer)
    assert res.returncode == 0, res.stderr
    series = parse(res.stdout)
    assert [s.value for s in find(series, "hw_gpu_up")] == [1]
    assert not find(series, "hw_gpu_utilization_ratio", hw_gpu_task="general")
    assert not find(series, "hw_gpu_power_draw_watts")
    assert not find(series, "hw_gpu_temperature_celsius", sensor="edge")
    assert find(series, "hw_gpu_temperature_celsius", sensor="junction")
    assert find(series, "hw_gpu_memory_usage_bytes")
    # Read through bus/pci/devices/<address>: named by that path.
    log = res.stderr.replace(str(tmp_path / "sys" / "bus" / "pci" / "devices"), "BUS")
    assert "BUS/0000:0b:00.0/gpu_busy_percent: not read: is a FIFO, not a regular file" \
        in log, log
    assert f"BUS/0000:0b:00.0/hwmon/{hwmon.name}/power1_average: not read: is a " \
        "character device, not a regular file" in log, log
    assert f"BUS/0000:0b:00.0/hwmon/{hwmon.name}/temp1_input: not read: is larger than " \
        "8192 bytes (1073741824)" in log, log
    assert [s.value for s in find(series, "gpu_exporter_collector_success",
                                  collector="amd")] == [0]
