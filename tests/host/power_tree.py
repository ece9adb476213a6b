"""Fake `/sys` trees of the node's power sources, laid out as the kernel lays them out.

RAPL (Documentation/power/powercap/powercap.rst, Documentation/ABI/testing/
sysfs-class-powercap; drivers/powercap/intel_rapl_common.c): zones under
devices/virtual/powercap/intel-rapl/, each also linked flat from class/powercap/:

    devices/virtual/powercap/intel-rapl/intel-rapl:0/            name = package-0
    devices/virtual/powercap/intel-rapl/intel-rapl:0/intel-rapl:0:0/   name = dram
    class/powercap/intel-rapl:0   -> ../../devices/virtual/powercap/intel-rapl/intel-rapl:0
    class/powercap/intel-rapl:0:0 -> ../../devices/virtual/powercap/intel-rapl/
                                     intel-rapl:0/intel-rapl:0:0

`energy_uj` is mode 0400 (root only since CVE-2020-8694), `max_energy_range_uj` 0444.
Intel's range is 262143328850 µJ (32-bit counter of 61 µJ units), AMD Zen's
65712999613 (15.3 µJ units); AMD has package and core, no dram.

ACPI power meters (Documentation/hwmon/acpi_power_meter.rst; drivers/hwmon/
acpi_power_meter.c registers with hwmon_device_register(), the legacy way: the
attributes, `name` included, are the ACPI device's, reached through `hwmonN/device`):

    devices/LNXSYSTM:00/LNXSYBUS:00/ACPI000D:00/   power1_average, power1_oem_info, name
    devices/LNXSYSTM:00/LNXSYBUS:00/ACPI000D:00/hwmon/hwmon3/device -> ../../../ACPI000D:00
    class/hwmon/hwmon3 -> ../../devices/LNXSYSTM:00/LNXSYBUS:00/ACPI000D:00/hwmon/hwmon3

`modern=True` puts them in hwmonN/ itself, as hwmon_device_register_with_info does.
"""

from __future__ import annotations

import os
from pathlib import Path

INTEL_RANGE_UJ = 262143328850
AMD_RANGE_UJ = 65712999613
_RAPL = "devices/virtual/powercap/intel-rapl"
_ACPI = "devices/LNXSYSTM:00/LNXSYBUS:00"


def _write(path: Path, text: str, mode: int = 0o444) -> None:
    path.write_text(text + "\n")
    os.chmod(path, mode)


def _link(root: Path, cls: str, name: str, target: str) -> None:
    link = root / "class" / cls / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(root / target, link.parent))


def rapl_zone(root: Path, zone: str, name: str, energy_uj: int | str,
              range_uj: int = INTEL_RANGE_UJ) -> Path:
    """A zone `intel-rapl:N` or `intel-rapl:N:M` (its parent made first)."""
    parts = zone.split(":")
    rel = f"{_RAPL}/{zone}" if len(parts) == 2 else f"{_RAPL}/{':'.join(parts[:2])}/{zone}"
    folder = root / rel
    folder.mkdir(parents=True)
    _write(folder / "name", name)
    _write(folder / "energy_uj", str(energy_uj), 0o400)
    _write(folder / "max_energy_range_uj", str(range_uj))
    _write(folder / "enabled", "1", 0o644)
    _write(folder / "constraint_0_name", "long_term")
    _write(folder / "constraint_0_power_limit_uw", "205000000", 0o644)
    _link(root, "powercap", zone, rel)
    return folder / "energy_uj"


def intel_two_sockets(root: Path, start_uj: int = 1_000_000) -> dict[str, Path]:
    """An Intel Xeon two-socket server: package and dram per socket, psys left aside."""
    (root / _RAPL).mkdir(parents=True)
    _write(root / _RAPL / "enabled", "1", 0o644)
    _link(root, "powercap", "intel-rapl", _RAPL)
    out = {}
    for n in (0, 1):
        out[f"package-{n}"] = rapl_zone(root, f"intel-rapl:{n}", f"package-{n}", start_uj)
        out[f"dram-{n}"] = rapl_zone(root, f"intel-rapl:{n}:0", "dram", start_uj)
    rapl_zone(root, "intel-rapl:2", "psys", start_uj)  # the platform: not a socket
    return out


def amd_epyc(root: Path, start_uj: int = 1_000_000) -> dict[str, Path]:
    """An AMD EPYC socket: package and core, no dram."""
    (root / _RAPL).mkdir(parents=True)
    _link(root, "powercap", "intel-rapl", _RAPL)
    return {
        "package-0": rapl_zone(root, "intel-rapl:0", "package-0", start_uj, AMD_RANGE_UJ),
        "core-0": rapl_zone(root, "intel-rapl:0:0", "core", start_uj, AMD_RANGE_UJ),
    }


def power_meter(root: Path, hwmon: int, acpi: int, oem_info: str, micro_watts: int | str,
                *, modern: bool = False) -> Path:
    """One ACPI000D power meter; returns its power1_average."""
    device = root / _ACPI / f"ACPI000D:{acpi:02d}"
    folder = device / "hwmon" / f"hwmon{hwmon}"
    folder.mkdir(parents=True)
    (folder / "device").symlink_to(f"../../../ACPI000D:{acpi:02d}")
    attrs = folder if modern else device
    _write(attrs / "name", "power_meter")
    _write(attrs / "power1_average", str(micro_watts))
    _write(attrs / "power1_oem_info", oem_info)
    _write(attrs / "power1_model_number", "")
    _write(attrs / "power1_serial_number", "")
    _write(attrs / "power1_is_battery", "0")
    _write(attrs / "power1_average_interval", "1000", 0o644)
    _write(attrs / "power1_accuracy", "95.0%")
    _link(root, "hwmon", f"hwmon{hwmon}",
          str(folder.relative_to(root)))
    return attrs / "power1_average"


def grace(root: Path, socket: int = 0, first_hwmon: int = 1, *, modern: bool = False
          ) -> dict[str, Path]:
    """A Grace socket's four meters, in the order its firmware lists them (GH200)."""
    out = {}
    for i, (rail, watts) in enumerate((("Module", 650), ("Grace", 180), ("CPU", 120),
                                       ("SysIO", 60))):
        n = socket * 4 + i
        out[rail] = power_meter(root, first_hwmon + n, n, f"{rail} Power Socket {socket}",
                                watts * 1_000_000, modern=modern)
    return out


def other_hwmon(root: Path, hwmon: int, name: str) -> None:
    """A hwmon that is no power meter (a CPU's coretemp)."""
    folder = root / "devices" / "platform" / f"{name}.0" / "hwmon" / f"hwmon{hwmon}"
    folder.mkdir(parents=True)
    _write(folder / "name", name)
    _write(folder / "temp1_input", "45000")
    _link(root, "hwmon", f"hwmon{hwmon}", str(folder.relative_to(root)))
