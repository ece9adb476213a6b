"""Host metrics, so that one exporter covers GPU-less nodes too: CPU, memory,
filesystems, disks and network interfaces."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from gpu_exporter.collectors.base import Availability, Collector, Feature, Sink
from gpu_exporter.model import catalogue as c
from gpu_exporter.model.flagtypes import regex
from gpu_exporter.model.records import Direction
from gpu_exporter.model.settings import Option
from gpu_exporter.readers.procfs import host


def _exclude(name: str, default: str, what: str, by_default: str = "") -> Option[str]:
    """A flag naming, by a regular expression, what the collector leaves out."""
    default_is = f" ({by_default} by default)" if by_default else ""
    return Option(name, regex, default,
                  f"Regular expression of {what} left out{default_is}; empty: none.")


FS_TYPES_OPTION = _exclude(
    "host.filesystem-types-exclude", host.DEFAULT_FS_TYPES_EXCLUDE, "filesystem types",
    "pseudo and read-only image filesystems")
MOUNTPOINTS_OPTION = _exclude(
    "host.filesystem-mountpoints-exclude", host.DEFAULT_MOUNTPOINTS_EXCLUDE, "mount points")
DISKS_OPTION = _exclude(
    "host.disks-exclude", host.DEFAULT_DISKS_EXCLUDE, "block devices",
    "partitions, loop and RAM disks")
INTERFACES_OPTION = _exclude(
    "host.network-interfaces-exclude", host.DEFAULT_INTERFACES_EXCLUDE, "network interfaces",
    "loopback")


def _compile(text: str) -> re.Pattern[str]:
    return re.compile(text) if text else re.compile(r"(?!)")


class HostCollector(Collector):
    name = "host"
    help = "CPU, memory, filesystem, disk and network-interface metrics of the host."
    options = (FS_TYPES_OPTION, MOUNTPOINTS_OPTION, DISKS_OPTION, INTERFACES_OPTION)

    _netlink: host.NetlinkInterfaces | None = None

    def start(self) -> Availability:
        opt = self.settings.get
        self._fs_types = _compile(opt(FS_TYPES_OPTION))
        self._mountpoints = _compile(opt(MOUNTPOINTS_OPTION))
        self._disks = _compile(opt(DISKS_OPTION))
        self._interfaces = _compile(opt(INTERFACES_OPTION))
        self._cpu_before: host.CpuTimes | None = None
        procfs = self.settings.procfs
        self._filesystems_reader = host.Filesystems(procfs, self._fs_types, self._mountpoints)
        problem = host.procfs_problem(procfs)
        if problem:
            # CPU, memory, disks and mounts all come from there: nothing to report.
            return Availability.unavailable(problem, (
                f"point --path.procfs (now {procfs}) at a procfs: the host's /proc, in a "
                "container mounted read-only (docker -v /proc:/host/proc:ro, Kubernetes a "
                "hostPath volume)"))
        unread = self._unread(procfs)
        try:
            self._netlink = host.NetlinkInterfaces()
            self._network_state = Availability.enabled()
        except OSError as exc:
            self._netlink = None
            self._network_state = Availability.unavailable(
                f"netlink: {exc}", "allow AF_NETLINK sockets (systemd: "
                "RestrictAddressFamilies= lists AF_NETLINK; a seccomp profile must not "
                "refuse socket(AF_NETLINK))")
        # A source that cannot be read leaves its values out every scrape (a collector
        # failure, logged once): doctor names it from the start.
        return Availability.enabled("; ".join(unread))

    @staticmethod
    def _unread(procfs: str) -> list[str]:
        """What of the host's sources cannot be read, and why (a FIFO, a device, a file
        over its cap where the kernel's should be: `readers.files`)."""
        out = []
        never = re.compile(r"(?!)")
        reads: tuple[tuple[str, Callable[[], object]], ...] = (
            ("memory", lambda: host.read_memory(procfs)),
            ("disks", lambda: host.read_disks(never, procfs)),
            ("filesystems", lambda: host.read_mount_paths(procfs)),
        )
        for part, read in reads:
            try:
                read()
            except (OSError, ValueError) as exc:
                out.append(f"{part} not read: {exc}")
        return out

    def features(self) -> Sequence[Feature]:
        return [Feature("network", self._network_state)]

    def close(self) -> None:
        if self._netlink is not None:
            self._netlink.close()
            self._netlink = None

    def guarded(self) -> bool:
        # statvfs of a network or FUSE filesystem waits for its server; the rest reads
        # the kernel's own tables.
        return self._filesystems_reader.may_block

    def collect(self, sink: Sink) -> None:
        parts: tuple[tuple[str, Callable[[Sink], None]], ...] = (
            ("cpu", self._cpu), ("memory", self._memory),
            ("filesystems", self._filesystems), ("disks", self._disk_io),
            ("network", self._network),
        )
        for key, part in parts:
            # One part that cannot be read leaves the others reporting.
            try:
                part(sink)
            except (OSError, ValueError, KeyError) as exc:
                sink.fail(key, f"{key}: {exc}")

    def _cpu(self, sink: Sink) -> None:
        now = host.read_cpu_times(self.settings.procfs)
        ratio = host.cpu_utilization(self._cpu_before, now)
        self._cpu_before = now
        c.SYSTEM_CPU_UTILIZATION.emit(sink, ratio, {})

    def _memory(self, sink: Sink) -> None:
        mem = host.read_memory(self.settings.procfs)
        for state, nbytes in mem.by_state.items():
            c.SYSTEM_MEMORY_USAGE.emit(sink, nbytes, {"system_memory_state": state})
        c.SYSTEM_MEMORY_UTILIZATION.emit(sink, mem.utilization_ratio, {})

    def _filesystems(self, sink: Sink) -> None:
        readings, errors = self._filesystems_reader.read()
        for fs in readings:
            for state, nbytes in fs.by_state.items():
                c.SYSTEM_FILESYSTEM_USAGE.emit(sink, nbytes, {
                    "system_device": fs.device, "system_filesystem_mountpoint": fs.mountpoint,
                    "system_filesystem_type": fs.fs_type, "system_filesystem_state": state,
                })
        for mountpoint, error in errors:
            sink.fail(f"statvfs:{mountpoint}", f"statvfs {mountpoint}: {error}")

    def _disk_io(self, sink: Sink) -> None:
        for d in host.read_disks(self._disks, self.settings.procfs):
            c.SYSTEM_DISK_IO.emit(
                sink, d.read_bytes, {"system_device": d.device, "disk_io_direction": "read"})
            c.SYSTEM_DISK_IO.emit(
                sink, d.write_bytes, {"system_device": d.device, "disk_io_direction": "write"})

    def _network(self, sink: Sink) -> None:
        if self._netlink is None:
            return
        for i in self._netlink.read(self._interfaces):
            directions: tuple[tuple[Direction, int, int], ...] = (
                ("receive", i.receive_bytes, i.receive_errors),
                ("transmit", i.transmit_bytes, i.transmit_errors),
            )
            for direction, nbytes, errors in directions:
                labels: c.NetworkLabels = {"network_interface_name": i.name,
                                           "network_io_direction": direction}
                c.SYSTEM_NETWORK_IO.emit(sink, nbytes, labels)
                c.SYSTEM_NETWORK_ERRORS.emit(sink, errors, labels)
