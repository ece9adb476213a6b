"""Host readings in base units: CPU time, memory by state, filesystem space, disk and
network traffic. Network counters come from rtnetlink (the kernel's 64-bit
interface statistics of the exporter's network namespace); the rest from procfs (read
through `sources.files`: never waiting on a file, never more than a cap of it) and
statvfs.
"""

from __future__ import annotations

import os
import re
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from gpu_exporter.sources import files

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


# Caps on what is read of each procfs file (sources.files: regular files only, never
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

    def read(self) -> tuple[list[FilesystemReading], list[tuple[str, str]]]:
        raw = _mounts_file(self._procfs)
        if raw != self._raw:
            self._wanted = self._select(_parse_mounts(raw))
            self._raw = raw
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


# rtnetlink (linux/netlink.h, linux/rtnetlink.h, linux/if_link.h): a dump of every
# link, each an RTM_NEWLINK message whose attributes hold its name and its counters.
_NLMSG = struct.Struct("=IHHII")  # length, type, flags, sequence, port
_RTATTR = struct.Struct("=HH")  # length, type
_IFINFOMSG_BYTES = 16
_NLMSG_ERROR, _NLMSG_DONE, _RTM_NEWLINK, _RTM_GETLINK = 2, 3, 16, 18
_NLM_F_REQUEST, _NLM_F_DUMP, _NLM_F_DUMP_INTR = 0x1, 0x300, 0x10
_IFLA_IFNAME, _IFLA_STATS, _IFLA_STATS64 = 3, 7, 23
# rx_packets, tx_packets, rx_bytes, tx_bytes, rx_errors, tx_errors: the head that
# rtnl_link_stats (32-bit, old kernels) and rtnl_link_stats64 share.
_STATS32, _STATS64 = struct.Struct("=6I"), struct.Struct("=6Q")
_RECV_BYTES = 64 * 1024
NETLINK_TIMEOUT_SECONDS = 5.0  # the kernel answers at once; a hung socket fails the part
_DUMP_ATTEMPTS = 3  # a dump the kernel marks interrupted (links changed) is asked again


class NetlinkInterfaces:
    """Interface statistics over one rtnetlink socket, kept open between scrapes: one
    RTM_GETLINK dump a scrape, of which only each link's name and counters are decoded
    (a general netlink library decodes every attribute of every link, several times
    the cost)."""

    def __init__(self) -> None:
        self._sock = self._open()
        self._seq = 0

    @staticmethod
    def _open() -> socket.socket:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                             socket.NETLINK_ROUTE)
        try:
            sock.bind((0, 0))
            sock.settimeout(NETLINK_TIMEOUT_SECONDS)
        except OSError:
            sock.close()
            raise
        return sock

    def read(self, exclude: re.Pattern[str]) -> list[InterfaceStats]:
        try:
            for _ in range(_DUMP_ATTEMPTS):
                links, interrupted = self._dump()
                if not interrupted:
                    break
        except (OSError, ValueError):
            # A dump left half read would answer the next request with EBUSY: the next
            # scrape starts on a new socket.
            self._sock.close()
            self._sock = self._open()
            raise
        out = [i for i in links if not exclude.search(i.name)]
        out.sort(key=lambda s: s.name)
        return out

    def _dump(self) -> tuple[list[InterfaceStats], bool]:
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        seq = self._seq
        request = _NLMSG.pack(_NLMSG.size + _IFINFOMSG_BYTES, _RTM_GETLINK,
                              _NLM_F_REQUEST | _NLM_F_DUMP, seq, 0) + bytes(_IFINFOMSG_BYTES)
        self._sock.send(request)
        out: list[InterfaceStats] = []
        interrupted = False
        while True:
            data = self._sock.recv(_RECV_BYTES)
            if not data:
                raise OSError("netlink: the socket was closed")
            at = 0
            while at + _NLMSG.size <= len(data):
                length, kind, flags, msg_seq, _ = _NLMSG.unpack_from(data, at)
                if length < _NLMSG.size:
                    raise ValueError(f"netlink: a message of {length} bytes")
                body, at = at + _NLMSG.size, at + ((length + 3) & ~3)
                if msg_seq != seq:
                    continue  # left over from a dump an earlier scrape gave up on
                interrupted = interrupted or bool(flags & _NLM_F_DUMP_INTR)
                if kind == _NLMSG_DONE:
                    return out, interrupted
                if kind == _NLMSG_ERROR:
                    errno = -struct.unpack_from("=i", data, body)[0]
                    raise OSError(errno, f"netlink: {os.strerror(errno)}")
                if kind == _RTM_NEWLINK:
                    link = _link(data, body + _IFINFOMSG_BYTES, body - _NLMSG.size + length)
                    if link is not None:
                        out.append(link)

    def close(self) -> None:
        self._sock.close()


def _link(data: bytes, at: int, end: int) -> InterfaceStats | None:
    """Name and counters from one link's attributes; None without either (as a link
    without statistics: nothing to count)."""
    name: str | None = None
    counters: tuple[int, ...] | None = None
    while at + _RTATTR.size <= end:
        length, kind = _RTATTR.unpack_from(data, at)
        if length < _RTATTR.size:
            break
        value = at + _RTATTR.size
        if kind == _IFLA_IFNAME:
            name = _text(data[value:at + length].split(b"\0", 1)[0])
        elif kind == _IFLA_STATS64 and length - _RTATTR.size >= _STATS64.size:
            counters = _STATS64.unpack_from(data, value)
        elif kind == _IFLA_STATS and counters is None and \
                length - _RTATTR.size >= _STATS32.size:
            counters = _STATS32.unpack_from(data, value)
        at += (length + 3) & ~3
    if not name or counters is None:
        return None
    return InterfaceStats(name=name, receive_bytes=counters[2], transmit_bytes=counters[3],
                          receive_errors=counters[4], transmit_errors=counters[5])
