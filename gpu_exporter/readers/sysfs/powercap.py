"""RAPL energy counters through the powercap framework (`/sys/class/powercap/intel-rapl:*`,
Documentation/power/powercap/powercap.rst, Documentation/ABI/testing/sysfs-class-powercap),
in joules.

The `intel-rapl` control type has one zone per socket, `intel-rapl:N` named `package-N`,
with subzones `intel-rapl:N:M` named `dram` or `core` (AMD EPYC, served by the same
driver since Linux 5.8/5.11: package and core, no DRAM). `psys` (the platform, laptops)
and `uncore` (an integrated GPU) are left out: neither is a server socket's rail.
`intel-rapl-mmio:*` zones repeat the package counter through MMIO: left out too.

`energy_uj` counts µJ and wraps to 0 at `max_energy_range_uj` (about 262 kJ: at 250 W a
package wraps every 17 minutes). `EnergyTotals` turns it into a counter that never goes
back. Since CVE-2020-8694 (Platypus) kernels make `energy_uj` readable by root only.
It is read every scrape through a held descriptor (`files.HeldFile`: opened at the first
read, then one pread a scrape); whoever stops reading a zone closes it (`close`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpu_exporter.readers import files
from gpu_exporter.readers.file_values import (
    MAX_READ_BYTES,
    Problems,
    listing,
    numbered,
    read_held_int,
    read_int,
    read_text,
)

CONTROL_TYPE = "intel-rapl"
MICRO = 1e-6
# No CPU package or DRAM zone draws this: a "wrap" that would mean more was a restart.
MAX_ZONE_WATTS = 5000.0
# subzone name -> (hw_type, rail)
_SUBZONES = {"dram": ("memory", "dram"), "core": ("cpu", "core")}


@dataclass(frozen=True)
class Zone:
    """One RAPL zone, found once: its counter file and what it measures."""

    energy_file: str
    max_range_uj: int  # energy_uj wraps to 0 here
    hw_type: str  # "cpu", "memory"
    hw_id: str  # "socket0"
    rail: str  # "package", "dram", "core"
    # energy_uj, held open between reads (opened at the first)
    energy: files.HeldFile = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "energy", files.HeldFile(self.energy_file,
                                                          MAX_READ_BYTES))


def _socket(name: str | None) -> int | None:
    if name and name.startswith("package-") and name[8:].isdigit():
        return int(name[8:])
    return None


def _zone(folder: str, hw_type: str, hw_id: str, rail: str, problems: Problems
          ) -> Zone | None:
    names = listing(folder)
    if "energy_uj" not in names:
        return None
    top = read_int(f"{folder}/max_energy_range_uj", problems) \
        if "max_energy_range_uj" in names else None
    if not top:
        problems.add(f"{folder}/max_energy_range_uj", "no wrap range: zone left out")
        return None
    return Zone(f"{folder}/energy_uj", top, hw_type, hw_id, rail)


def find_zones(sysfs: str, problems: Problems) -> list[Zone]:
    """Package, DRAM and core zones of every socket."""
    root = f"{sysfs}/class/powercap"
    out = []
    for n in numbered(listing(root), f"{CONTROL_TYPE}:"):
        top = f"{root}/{CONTROL_TYPE}:{n}"
        socket = _socket(read_text(f"{top}/name"))
        if socket is None:  # psys, or not a package
            continue
        hw_id = f"socket{socket}"
        zone = _zone(top, "cpu", hw_id, "package", problems)
        if zone:
            out.append(zone)
        for m in numbered(listing(top), f"{CONTROL_TYPE}:{n}:"):
            sub = f"{top}/{CONTROL_TYPE}:{n}:{m}"
            kind = _SUBZONES.get(read_text(f"{sub}/name") or "")
            if kind:
                zone = _zone(sub, kind[0], hw_id, kind[1], problems)
                if zone:
                    out.append(zone)
    return out


def read_uj(zone: Zone, problems: Problems) -> int | None:
    """The raw counter (µJ); None when unreadable (non-root) or garbage (a problem)."""
    return read_held_int(zone.energy, problems, maximum=zone.max_range_uj)


def close(zones: Iterable[Zone]) -> None:
    """Closes the zones' held files (the zones are no longer read)."""
    for zone in zones:
        zone.energy.close()


@dataclass
class EnergyTotals:
    """Counters that never go back, from counters that wrap or restart.

    A raw value below the last one is a wrap, or the counter starting again from 0 (the
    RAPL driver reloaded). A wrap adds what was left to the range plus the new value; when
    that would mean more than `MAX_ZONE_WATTS` since the last read, no wrap can explain
    it, and it is a restart: the new value alone is added. Either way the total only
    grows. The total starts at the first raw value: the exporter restarts with the
    machine, so a reboot is a counter reset, as Prometheus expects (rate() and increase()
    handle it)."""

    _last: dict[str, tuple[int, float]] = field(default_factory=dict)  # raw µJ, seconds
    _total: dict[str, int] = field(default_factory=dict)  # µJ

    def joules(self, zone: Zone, raw_uj: int, now: float) -> float:
        """The zone's total in J after a read of `raw_uj` at `now` (monotonic seconds)."""
        key = zone.energy_file
        last = self._last.get(key)
        if last is None:
            total = raw_uj
        else:
            before, then = last
            if raw_uj >= before:
                delta = raw_uj - before
            else:
                wrapped = zone.max_range_uj - before + raw_uj
                seconds = max(now - then, 1e-3)
                delta = wrapped if wrapped * MICRO / seconds <= MAX_ZONE_WATTS else raw_uj
            total = self._total[key] + delta
        self._last[key] = (raw_uj, now)
        self._total[key] = total
        return total * MICRO
