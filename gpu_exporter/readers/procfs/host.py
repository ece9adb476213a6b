"""Host readings in base units: CPU time, memory by state, filesystem space, disk and
network traffic. Network counters come from rtnetlink (`rtnetlink`: the kernel's 64-bit
interface statistics of the exporter's network namespace); the rest from procfs (read
through `readers.files`: never waiting on a file, never more than a cap of it) and
statvfs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from gpu_exporter.readers import files
from gpu_exporter.readers.procfs import rtnetlink

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


# Caps on what is read of each procfs file (readers.files: regular files only, never
# waiting, never more than the cap): a 1 GB `meminfo` or a 200 MB `self/mounts` put
# where the kernel's belong is refused with the reason, not read into memory.
MEMINFO_MAX_BYTES = 64 * 1024  # ~1.5 KiB on a real kernel
DISKSTATS_MAX_BYTES = 1024 * 1024  # ~150 bytes a block device
MOUNTS_MAX_BYTES = 4 * 1024 * 1024  # ~150 bytes a mount: 25,000 mounts
_STAT_HEAD_BYTES = 4096  # the first line of /proc/stat (the rest: one per CPU, IRQs)
_SECTOR_BYTES = 512  # /proc/diskstats counts 512-byte sectors whatever the disk's
_MOUNT_ESCAPES = re.compile(rb"\\([0-7]{3})")  # getmntent's \040 (space) and kin
_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def _stat_cpu_line(procfs: str) -> bytes:
    return files.head(os.path.join(procfs, "stat"), _STAT_HEAD_BYTES).split(b"\n", 1)[0]


def procfs_problem(procfs: str) -> str | None:
    """Why `procfs` cannot give the host's CPU, memory and disk counters, or None."""
    try:
        first = _stat_cpu_line(procfs)
    except files.Refused as exc:
        return f"cannot read {exc}"
    except OSError as exc:
        return f"cannot read {procfs}/stat: {exc.strerror or exc}"
    if not first.startswith(b"cpu "):
        return f"{procfs} is not a procfs: its stat file has no cpu line"
    return None


def read_cpu_times(procfs: str = "/proc") -> CpuTimes:
    """All CPUs' time from the first line of `<procfs>/stat` (USER_HZ ticks). guest and
    guest_nice are already inside user and nice (kernel accounting): not added again."""
    first = _stat_cpu_line(procfs)
    fields = first.split()
    if not fields or fields[0] != b"cpu" or len(fields) < 5:
        raise ValueError(f"{procfs}/stat: no cpu line")
    ticks = [int(v) for v in fields[1:1 + len(_CPU_FIELDS)]]
    hz = os.sysconf("SC_CLK_TCK")
    total = sum(ticks) / hz
    idle = sum(ticks[3:5]) / hz  # idle and iowait
    return CpuTimes(total - idle, total)


def cpu_utilization(before: CpuTimes | None, now: CpuTimes) -> float | None:
    """Busy fraction between two readings (since boot when there is no earlier one);
    None when no time passed, so nothing is divided by zero."""
    busy = now.busy_seconds - (before.busy_seconds if before else 0.0)
    total = now.total_seconds - (before.total_seconds if before else 0.0)
    if total <= 0:
        return None
    return min(1.0, max(0.0, busy / total))


def _meminfo(procfs: str) -> dict[str, int]:
    out: dict[str, int] = {}
    path = os.path.join(procfs, "meminfo")
    for line in files.read_capped(path, MEMINFO_MAX_BYTES).splitlines():
        key, sep, rest = line.partition(b":")
        parts = rest.split()
        if sep and parts and parts[0].isdigit():
            scale = 1024 if parts[1:] == [b"kB"] else 1
            out[key.decode("ascii", "replace")] = int(parts[0]) * scale
    return out


def read_memory(procfs: str = "/proc") -> MemoryReading:
    """Memory by state from `<procfs>/meminfo`. cached counts the reclaimable slab too
    (SReclaimable: what `free`(1) and psutil count as cache)."""
    m = _meminfo(procfs)
    missing = [k for k in ("MemTotal", "MemFree", "Buffers", "Cached") if k not in m]
    if missing or not m["MemTotal"]:
        raise ValueError(f"{procfs}/meminfo has no {', '.join(missing) or 'MemTotal'}")
    total, free, buffers = m["MemTotal"], m["MemFree"], m["Buffers"]
    cached = m["Cached"] + m.get("SReclaimable", 0)
    # MemAvailable is the kernel's own estimate (Linux 3.14+); older: what is not in use.
    available = m.get("MemAvailable", free + buffers + cached)
    # The four states add up to the total (OpenTelemetry's partition; `free`(1) counts
    # the same way).
    used = total - free - buffers - cached
    if used < 0:  # containers (LXC) can report inconsistent numbers
        used = total - free
    states = {"used": used, "free": free, "buffers": buffers, "cached": cached}
    return MemoryReading(total_bytes=total, by_state=states,
                         utilization_ratio=(total - available) / total)


def _unescape(field: bytes) -> bytes:
    return _MOUNT_ESCAPES.sub(lambda m: bytes([int(m.group(1), 8) & 0xFF]), field)


def read_mount_paths(procfs: str = "/proc") -> list[tuple[str, bytes, str]]:
    """(device, mount point as the kernel's bytes, fs type) of every mount the
    exporter's process sees (`<procfs>/self/mounts`, octal escapes such as `\\040`
    decoded). The mount point stays bytes: it need not be UTF-8, and statvfs needs it
    exactly."""
    return _parse_mounts(_mounts_file(procfs))


def _mounts_file(procfs: str) -> bytes:
    return files.read_capped(os.path.join(procfs, "self", "mounts"), MOUNTS_MAX_BYTES)


def _parse_mounts(raw: bytes) -> list[tuple[str, bytes, str]]:
    out = []
    for line in raw.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            out.append((_text(_unescape(parts[0])), _unescape(parts[1]),
                        _text(_unescape(parts[2]))))
    return out


def _text(raw: bytes) -> str:
    """Text for a label: an invalid UTF-8 byte replaced (a label must encode)."""
    return raw.decode("utf-8", "replace")


def read_mounts(procfs: str = "/proc") -> list[tuple[str, str, str]]:
    """(device, mount point, fs type) of every mount, as text."""
    return [(d, _text(m), t) for d, m, t in read_mount_paths(procfs)]


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
    return Filesystems(procfs, types_exclude, mountpoints_exclude).read()


# Filesystems whose statvfs can wait without bound: on a server (NFS, SMB, Ceph, Lustre,
# GPFS, ...) or a user-space daemon (FUSE).
_REMOTE_FS = re.compile(
    r"(nfs4?|cifs|smb3?|smbfs|ceph|glusterfs|fuse(blk|ctl)?|fuse\..*|9p|lustre|gpfs|beegfs|"
    r"afs|davfs|ncpfs|ocfs2|gfs2|virtiofs|panfs|wekafs|orangefs|pvfs2)$")


class Filesystems:
    """`read_filesystems`, keeping the mounts to read from one call to the next: the
    mount table is read every time and parsed and filtered again only when its bytes
    changed (a Kubernetes node lists hundreds of container mounts, all left out, that
    were otherwise decoded and matched every scrape)."""

    def __init__(self, procfs: str, types_exclude: re.Pattern[str],
                 mountpoints_exclude: re.Pattern[str]) -> None:
        self._procfs = procfs
        self._types_exclude = types_exclude
        self._mountpoints_exclude = mountpoints_exclude
        self._raw: bytes | None = None
        self._wanted: list[tuple[str, bytes, str, str]] = []
        # Whether a mount to read is a filesystem whose statvfs may wait on a server
        # (True until the mount table is first read).
        self.may_block = True

    def read(self) -> tuple[list[FilesystemReading], list[tuple[str, str]]]:
        raw = _mounts_file(self._procfs)
        if raw != self._raw:
            self._wanted = self._select(_parse_mounts(raw))
            self._raw = raw
            self.may_block = any(_REMOTE_FS.match(fs_type) for *_, fs_type in self._wanted)
        readings: list[FilesystemReading] = []
        errors: list[tuple[str, str]] = []
        for device, path, mountpoint, fs_type in self._wanted:
            try:
                st = os.statvfs(path)
            except OSError as exc:
                errors.append((mountpoint, exc.strerror or str(exc)))
                continue
            if st.f_blocks == 0:
                continue  # no space to speak of (e.g. an empty tmpfs-like special mount)
            readings.append(FilesystemReading(device, mountpoint, fs_type,
                                              statvfs_states(st)))
        return readings, errors

    def _select(self, mounts: list[tuple[str, bytes, str]]
                ) -> list[tuple[str, bytes, str, str]]:
        """(device, path, mount point as text, fs type) of the mounts to read."""
        out = []
        seen: set[str] = set()
        for device, path, fs_type in mounts:
            mountpoint = _text(path)
            if (self._types_exclude.search(fs_type)
                    or self._mountpoints_exclude.search(mountpoint)):
                continue
            if mountpoint in seen:  # over-mounted: only the top mount is visible anyway
                continue
            seen.add(mountpoint)
            out.append((device, path, mountpoint, fs_type))
        return out


def read_disks(exclude: re.Pattern[str], procfs: str = "/proc") -> list[DiskIo]:
    """Bytes read and written by each block device (`<procfs>/diskstats`: major, minor,
    name, then reads, merged, sectors read, ms, writes, merged, sectors written, ...; a
    partition on Linux < 2.6.25 has only reads, sectors read, writes, sectors written)."""
    raw = files.read_capped(os.path.join(procfs, "diskstats"), DISKSTATS_MAX_BYTES)
    out = []
    for line in raw.splitlines():
        f = line.split()
        if len(f) >= 14:
            read_sectors, write_sectors = f[5], f[9]
        elif len(f) == 7:
            read_sectors, write_sectors = f[4], f[6]
        else:
            continue
        name = _text(f[2])
        if not exclude.search(name):
            out.append(DiskIo(name, int(read_sectors) * _SECTOR_BYTES,
                              int(write_sectors) * _SECTOR_BYTES))
    out.sort(key=lambda d: d.device)
    return out


class NetlinkInterfaces:
    """Interface statistics over one rtnetlink socket, kept open between scrapes."""

    def __init__(self) -> None:
        self._dump = rtnetlink.LinkDump()

    def read(self, exclude: re.Pattern[str]) -> list[InterfaceStats]:
        try:
            links = self._dump.links()
        except (OSError, ValueError):
            # A dump left half read would answer the next request with EBUSY: the next
            # scrape starts on a new socket.
            self._dump.close()
            self._dump = rtnetlink.LinkDump()
            raise
        out = [InterfaceStats(name=link.name, receive_bytes=link.receive_bytes,
                              transmit_bytes=link.transmit_bytes,
                              receive_errors=link.receive_errors,
                              transmit_errors=link.transmit_errors)
               for link in links if not exclude.search(link.name)]
        out.sort(key=lambda s: s.name)
        return out

    def close(self) -> None:
        self._dump.close()
