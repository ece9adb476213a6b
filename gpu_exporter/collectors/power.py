"""Power and energy of the node besides its GPUs: CPU sockets, their memory, superchip
modules (`hw_power_watts`, `hw_energy_joules_total`).

Sources, each a feature (`power.acpi_power_meter`, `power.rapl`), in the order of the
ladder: when two give the same rail of the same socket or module, the first wins and the
other is not reported, so that a sum over rails never counts one twice:

1. ACPI power meters: the firmware's own measurement (Grace's socket, CPU, SysIO and
   module rails; an x86 BMC's whole-system meter);
2. RAPL through powercap: package (the socket envelope, the ACPI "socket" rail), DRAM
   and core counters of x86 sockets.

Sources are found at start and again every --collector.retry-interval (a zone whose
driver loads later is read without a restart); each value is read through a held
descriptor, one pread a scrape (`files.HeldFile`), closed when its source is found no
more or the collector closes.

docs/node-power.md holds the ladder, the rails and what each deploy file grants.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_exporter.collectors.base import Availability, Collector, Feature, Sink
from gpu_exporter.model import catalogue as c
from gpu_exporter.readers import files
from gpu_exporter.readers.file_values import Problems
from gpu_exporter.readers.sysfs import power_meter, powercap

# Rails that measure the same thing under the names of two sources.
SAME_RAIL = {"package": "socket"}
RAPL_FIX = (
    "energy_uj is readable by root only since CVE-2020-8694: run the exporter as uid 0 "
    "(deploy/kubernetes does: runAsUser 0, no capabilities), or give its group read "
    "access (systemd-tmpfiles: `z /sys/class/powercap/intel-rapl:*/energy_uj 0440 root "
    "<group>`, reopening that side channel to that group only); the Dockerfile's user "
    "10001, deploy/compose's compose.yaml and deploy/systemd's DynamicUser cannot read "
    "it (their eBPF and process-fdinfo variants can: uid 0 or CAP_DAC_READ_SEARCH). "
    "docs/node-power.md")


@dataclass(frozen=True)
class _Rail:
    hw_type: str
    hw_id: str
    rail: str

    @property
    def key(self) -> tuple[str, str]:
        return self.hw_id, SAME_RAIL.get(self.rail, self.rail)

    def labels(self) -> c.NodePowerLabels:
        return {"hw_type": self.hw_type, "hw_id": self.hw_id, "hw_power_rail": self.rail}


def _rapl_unreadable(zones: Sequence[powercap.Zone]) -> Availability | None:
    """Why the counters cannot be read (the first zone's answer), with the fix; None when
    they can."""
    path = zones[0].energy_file
    try:
        files.head(path, 64, whole=True)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM):
            return Availability.unavailable(f"{path}: permission denied", RAPL_FIX)
        return Availability.unavailable(
            f"{path}: {exc}", "check the RAPL driver (dmesg: intel_rapl_common)")
    return None


class PowerCollector(Collector):
    name = "power"
    help = ("Power and energy of CPU sockets, memory and superchip modules (ACPI power "
            "meters, RAPL).")

    def start(self) -> Availability:
        self._meters: list[power_meter.Meter] = []
        self._zones: list[powercap.Zone] = []
        self._totals = powercap.EnergyTotals()
        self._last: dict[str, tuple[float, float]] = {}  # zone -> (monotonic, joules)
        found = self._discover()
        if not found:
            # nothing to report: doctor shows the collector alone, so it says both
            return Availability.unavailable(
                f"{self._acpi.reason}; {self._rapl.reason}",
                f"{self._acpi.fix}; {self._rapl.fix}")
        return Availability.enabled()

    def _discover(self) -> bool:
        """Finds the meters and zones (again), sets the features' states; False when
        there is none. As node_exporter's hwmon and rapl collectors would, the exporter
        sees a source that appears later (intel_rapl_msr or acpi_power_meter loaded
        after it started, a zone the driver registers late) and stops reading one that
        went: `collect` looks again every --collector.retry-interval. The counters'
        totals are kept across it, so a zone found again never goes back."""
        sysfs = self.settings.sysfs
        problems = Problems()
        meters = power_meter.find_meters(sysfs)
        zones = powercap.find_zones(sysfs, problems)
        power_meter.close(self._meters)
        powercap.close(self._zones)
        self._found_at = time.monotonic()
        self._problems = problems
        self._meters = meters
        taken = {_Rail(m.hw_type, m.hw_id, m.rail).key for m in meters}
        self._shadowed = [z for z in zones if _Rail(z.hw_type, z.hw_id, z.rail).key in taken]
        self._zones = [z for z in zones if z not in self._shadowed]
        self._acpi = self._meter_state(sysfs)
        self._rapl = self._rapl_state(sysfs, zones)
        if self._rapl.state != "enabled":
            powercap.close(self._zones)
            self._zones = []
        return bool(meters or zones)

    def close(self) -> None:
        power_meter.close(getattr(self, "_meters", ()))
        powercap.close(getattr(self, "_zones", ()))

    def _meter_state(self, sysfs: str) -> Availability:
        if self._meters:
            return Availability.enabled(f"{len(self._meters)} meter(s): " + ", ".join(
                f"{m.hw_id} {m.rail}" for m in self._meters))
        if not os.path.isdir(f"{sysfs}/class/hwmon"):  # empty is fine: a VM has none
            return Availability.unavailable(
                f"{sysfs}/class/hwmon cannot be listed",
                "pass --path.sysfs=<the host's /sys> (a container mounts it read-only)")
        return Availability.disabled(
            "no ACPI power meter (hwmon name power_meter)",
            "where the firmware has one (ACPI000D devices: Grace, most servers' BMC "
            "meters): modprobe acpi_power_meter")

    def _rapl_state(self, sysfs: str, zones: Sequence[powercap.Zone]) -> Availability:
        if not zones:
            return Availability.disabled(
                f"no RAPL package zone under {sysfs}/class/powercap",
                "on x86 (Intel, AMD Zen): modprobe intel_rapl_msr")
        unreadable = _rapl_unreadable(zones)
        if unreadable is not None:
            return unreadable
        notes = [f"{z.hw_id} {z.rail} taken from the ACPI power meter"
                 for z in self._shadowed] + [m for _, m in self._problems.items]
        return Availability.enabled("; ".join([f"{len(zones)} zone(s)", *notes]))

    def features(self) -> Sequence[Feature]:
        return [Feature("acpi_power_meter", self._acpi), Feature("rapl", self._rapl)]

    def guarded(self) -> bool:
        # An ACPI power meter's reading runs the firmware's method (_PMM), which may ask
        # the BMC and wait for it; RAPL counters are a register read.
        return bool(self._meters)

    def collect(self, sink: Sink) -> None:
        if time.monotonic() - self._found_at >= self.settings.retry_interval_seconds:
            self._discover()
        problems = Problems()
        for meter in self._meters:
            watts = power_meter.read_watts(meter, problems)
            if watts is not None:
                rail = _Rail(meter.hw_type, meter.hw_id, meter.rail)
                c.HW_POWER.emit(sink, watts, rail.labels())
        for zone in self._zones:
            raw = powercap.read_uj(zone, problems)
            if raw is None:
                continue
            now = time.monotonic()
            joules = self._totals.joules(zone, raw, now)
            labels = _Rail(zone.hw_type, zone.hw_id, zone.rail).labels()
            c.HW_ENERGY.emit(sink, joules, labels)
            before = self._last.get(zone.energy_file)
            self._last[zone.energy_file] = (now, joules)
            if before is not None and now > before[0]:
                c.HW_POWER.emit(sink, (joules - before[1]) / (now - before[0]), labels)
        for key, message in problems.items:
            sink.fail(key, message)
