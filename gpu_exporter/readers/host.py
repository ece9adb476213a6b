"""Host readings in base units: CPU time, memory by state, filesystem space, disk and
network traffic. Network counters come from netlink (pyroute2, the kernel's 64-bit
interface statistics of the exporter's network namespace); the rest from psutil and
statvfs.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psutil

# Pseudo filesystems, and read-only images (squashfs snaps, erofs, iso9660), as the
# node_exporter leaves them out: their "space" is not disk space anybody manages.
DEFAULT_FS_TYPES_EXCLUDE = (
    r"^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|devpts|devtmpfs|efivarfs|fusectl"
    r"|hugetlbfs|iso9660|mqueue|nsfs|overlay|proc|procfs|pstore|ramfs|rpc_pipefs|securityfs"
    r"|selinuxfs|squashfs|erofs|sysfs|tracefs)$"
)
DEFAULT_MOUNTPOINTS_EXCLUDE = (
    r"^/(dev|proc|run/credentials/.+|sys|var/lib/docker/.+|var/lib/containers/storage/.+"
    r"|var/lib/kubelet/pods/.+)($|/)"
)
# Partitions, RAM disks and loop devices: their traffic is already in the whole disk's.
DEFAULT_DISKS_EXCLUDE = r"^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p|mmcblk\d+p)\d+$"
DEFAULT_INTERFACES_EXCLUDE = r"^lo$"


@dataclass(frozen=True)
class CpuTimes:
    busy_seconds: float  # all CPUs together: everything but idle and iowait
    total_seconds: float


@dataclass(frozen=True)
class MemoryReading:
    total_bytes: int
    by_state: Mapping[str, int]  # used, free, buffers, cached: they add up to the total
    utilization_ratio: float  # (total - available) / total


@dataclass(frozen=True)
class FilesystemReading:
    device: str
    mountpoint: str
    fs_type: str
    by_state: Mapping[str, int]  # used, free (for unprivileged users), reserved


@dataclass(frozen=True)
class DiskIo:
    device: str
    read_bytes: int
    write_bytes: int


@dataclass(frozen=True)
class InterfaceStats:
    name: str
    receive_bytes: int
    transmit_bytes: int
    receive_errors: int
    transmit_errors: int


_psutil_lock = threading.Lock()


@contextmanager
def _psutil_procfs(procfs: str) -> Iterator[None]:
    """psutil reads /proc through one module global, `psutil.PROCFS_PATH`, and takes no
    path per call: each call here sets it for its own duration only (under a lock), so
    `--path.procfs` reaches psutil without psutil being configured for the whole
    process."""
    with _psutil_lock:
        default = psutil.PROCFS_PATH
        psutil.PROCFS_PATH = procfs
        try:
            yield
        finally:
            psutil.PROCFS_PATH = default


def procfs_problem(procfs: str) -> str | None:
    """Why `procfs` cannot give the host's CPU, memory and disk counters, or None."""
    try:
        with open(os.path.join(procfs, "stat"), "rb") as f:
            first = f.readline()
    except OSError as exc:
        return f"cannot read {procfs}/stat: {exc.strerror or exc}"
    if not first.startswith(b"cpu "):
        return f"{procfs} is not a procfs: its stat file has no cpu line"
    return None


def read_cpu_times(procfs: str = "/proc") -> CpuTimes:
    with _psutil_procfs(procfs):
        t = psutil.cpu_times()
    # guest and guest_nice are already inside user and nice (kernel accounting).
    total = sum(getattr(t, f, 0.0) for f in
                ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"))
    idle = t.idle + getattr(t, "iowait", 0.0)
    return CpuTimes(total - idle, total)


def cpu_utilization(before: CpuTimes | None, now: CpuTimes) -> float | None:
    """Busy fraction between two readings (since boot when there is no earlier one);
    None when no time passed, so nothing is divided by zero."""
    busy = now.busy_seconds - (before.busy_seconds if before else 0.0)
    total = now.total_seconds - (before.total_seconds if before else 0.0)
    if total <= 0:
        return None
    return min(1.0, max(0.0, busy / total))


def read_memory(procfs: str = "/proc") -> MemoryReading:
    with _psutil_procfs(procfs):
        vm = psutil.virtual_memory()
    # The four states add up to the total (OpenTelemetry's partition; `free`(1) counts
    # the same way). psutil's own `used` is total - available, which overlaps `cached`.
    used = vm.total - vm.free - vm.buffers - vm.cached
    if used < 0:  # containers (LXC) can report inconsistent numbers
        used = vm.total - vm.free
    states = {"used": used, "free": vm.free, "buffers": vm.buffers, "cached": vm.cached}
    return MemoryReading(
        total_bytes=vm.total, by_state=states,
        utilization_ratio=(vm.total - vm.available) / vm.total,
    )


def read_mounts(procfs: str = "/proc") -> list[tuple[str, str, str]]:
    """(device, mountpoint, fs type) of every mount the exporter's process sees
    (`<procfs>/self/mounts`, its octal escapes such as `\\040` decoded by psutil)."""
    with _psutil_procfs(procfs):
        parts = psutil.disk_partitions(all=True)
    return [(p.device, p.mountpoint, p.fstype) for p in parts]


def statvfs_states(st: os.statvfs_result) -> dict[str, int]:
    """used / free / reserved bytes, the way `df` counts them: free is what unprivileged
    users may still write; reserved is kept for root."""
    unit = st.f_frsize or st.f_bsize
    return {
        "used": (st.f_blocks - st.f_bfree) * unit,
        "free": st.f_bavail * unit,
        "reserved": (st.f_bfree - st.f_bavail) * unit,
    }


def read_filesystems(
    procfs: str, types_exclude: re.Pattern[str], mountpoints_exclude: re.Pattern[str],
) -> tuple[list[FilesystemReading], list[tuple[str, str]]]:
    """Readings, and (mountpoint, error) for mounts that could not be read."""
    readings: list[FilesystemReading] = []
    errors: list[tuple[str, str]] = []
    seen: set[str] = set()
    for device, mountpoint, fs_type in read_mounts(procfs):
        if types_exclude.search(fs_type) or mountpoints_exclude.search(mountpoint):
            continue
        if mountpoint in seen:  # over-mounted: only the top mount is visible anyway
            continue
        seen.add(mountpoint)
        try:
            st = os.statvfs(mountpoint)
        except OSError as exc:
            errors.append((mountpoint, exc.strerror or str(exc)))
            continue
        if st.f_blocks == 0:
            continue  # no space to speak of (e.g. an empty tmpfs-like special mount)
        readings.append(FilesystemReading(device, mountpoint, fs_type, statvfs_states(st)))
    return readings, errors


def read_disks(exclude: re.Pattern[str], procfs: str = "/proc") -> list[DiskIo]:
    with _psutil_procfs(procfs):
        counters = psutil.disk_io_counters(perdisk=True, nowrap=False) or {}
    return [
        DiskIo(name, c.read_bytes, c.write_bytes)
        for name, c in sorted(counters.items()) if not exclude.search(name)
    ]


class NetlinkInterfaces:
    """Interface statistics over one rtnetlink socket, kept open between scrapes."""

    def __init__(self) -> None:
        from pyroute2 import IPRoute

        self._ipr: Any = IPRoute()

    def read(self, exclude: re.Pattern[str]) -> list[InterfaceStats]:
        out = []
        for link in self._ipr.get_links():
            name = link.get_attr("IFLA_IFNAME")
            stats = link.get_attr("IFLA_STATS64") or link.get_attr("IFLA_STATS")
            if not name or stats is None or exclude.search(name):
                continue
            out.append(InterfaceStats(
                name=str(name),
                receive_bytes=int(stats["rx_bytes"]), transmit_bytes=int(stats["tx_bytes"]),
                receive_errors=int(stats["rx_errors"]),
                transmit_errors=int(stats["tx_errors"]),
            ))
        out.sort(key=lambda s: s.name)
        return out

    def close(self) -> None:
        self._ipr.close()
