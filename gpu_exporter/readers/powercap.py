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
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpu_exporter.readers.sysfs import Problems, listing, numbered, read_int, read_text

CONTROL_TYPE = "intel-rapl"
MICRO = 1e-6
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
    return read_int(zone.energy_file, problems, maximum=zone.max_range_uj)


@dataclass
class EnergyTotals:
    """Counters that never go back, from counters that wrap.

    A raw value below the last one is one wrap: the range is added to the zone's offset.
    Between two scrapes (seconds apart) a zone cannot count a whole range (hundreds of
    kJ), so one wrap is the only reading. The total starts at the first raw value: the
    exporter restarts with the machine, so a reboot is a counter reset, as Prometheus
    expects (rate() and increase() handle it)."""

    _last: dict[str, int] = field(default_factory=dict)
    _offset: dict[str, int] = field(default_factory=dict)

    def joules(self, zone: Zone, raw_uj: int) -> float:
        key = zone.energy_file
        last = self._last.get(key)
        offset = self._offset.get(key, 0)
        if last is not None and raw_uj < last:
            offset += zone.max_range_uj
            self._offset[key] = offset
        self._last[key] = raw_uj
        return (raw_uj + offset) * MICRO
