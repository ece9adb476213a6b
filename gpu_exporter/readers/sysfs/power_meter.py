"""ACPI 4.0 power meters (hwmon `power_meter`, Documentation/hwmon/acpi_power_meter.rst),
in watts.

A meter's `power1_average` is the average power over its interval in µW; its
`power1_oem_info` is the firmware's name for what it measures. NVIDIA Grace names them
`Grace Power Socket N` (the socket envelope), `CPU Power Socket N`, `SysIO Power Socket N`
and `Module Power Socket N` (the whole superchip: Grace, its GPUs and their memory). A
meter whose name follows no such pattern (an x86 server's BMC meter) measures the whole
system.

The driver registers two ways (drivers/hwmon/acpi_power_meter.c): the legacy
`hwmon_device_register()` puts the attributes on the ACPI device (`hwmonN/device/`, its
`name` there too), kernels that register with hwmon_device_register_with_info put them
in `hwmonN/` itself. Both are looked for.

A meter that reads 0 µW has no measurement (firmware that never filled it in, a meter
between intervals): absent, like an unreadable one, never 0 W.

`power1_average` is read every scrape through a held descriptor (`files.HeldFile`:
opened at the first read, then one pread a scrape); whoever stops reading a meter
closes it (`close`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpu_exporter.readers import files
from gpu_exporter.readers.file_values import (
    MAX_READ_BYTES,
    Problems,
    listing,
    numbered,
    read_held_int,
    read_text,
)

NAME = "power_meter"
MICRO = 1e-6
MAX_MICRO_WATTS = 1_000_000 * 1_000_000  # 1 MW: nothing on one ACPI meter draws more

# "Grace Power Socket 0", "Module Power Socket 1", ... (NVIDIA Grace firmware)
_SOCKET = re.compile(r"\s*(?P<rail>[A-Za-z]+)\s+Power\s+Socket\s+(?P<n>[0-9]+)\s*")
# rail name in oem_info -> (hw_type, hw_id prefix, rail label)
_RAILS: dict[str, tuple[str, str, str]] = {
    "grace": ("cpu", "socket", "socket"),
    "cpu": ("cpu", "socket", "cpu"),
    "sysio": ("cpu", "socket", "sysio"),
    "module": ("module", "module", "module"),
}


@dataclass(frozen=True)
class Meter:
    """One power meter, found once: the file read every scrape and what it measures."""

    average_file: str
    hw_type: str  # "cpu", "module", "system"
    hw_id: str  # "socket0", "module0", or the ACPI device ("ACPI000D:00")
    rail: str  # "socket", "cpu", "sysio", "module", "system"
    oem_info: str | None
    # power1_average, held open between reads (opened at the first)
    average: files.HeldFile = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "average", files.HeldFile(self.average_file,
                                                           MAX_READ_BYTES))


def _folder(hwmon: str) -> str | None:
    """The folder holding the meter's attributes: hwmonN/ or, legacy, hwmonN/device/."""
    for folder in (hwmon, f"{hwmon}/device"):
        if read_text(f"{folder}/name") == NAME and "power1_average" in listing(folder):
            return folder
    return None


def _device_name(hwmon: str, index: int) -> str:
    # the link's target names the ACPI device (ACPI000D:00): stable across boots
    try:
        return os.path.basename(os.readlink(f"{hwmon}/device"))
    except OSError:
        return f"meter{index}"


def classify(oem_info: str | None, fallback_id: str) -> tuple[str, str, str]:
    """(hw_type, hw_id, rail) of a meter by its oem_info."""
    m = _SOCKET.fullmatch(oem_info or "")
    rail = _RAILS.get(m.group("rail").lower()) if m else None
    if m is None or rail is None:
        return "system", fallback_id, "system"
    hw_type, prefix, label = rail
    return hw_type, f"{prefix}{int(m.group('n'))}", label


def find_meters(sysfs: str) -> list[Meter]:
    """Every ACPI power meter of the machine, by hwmon number."""
    root = f"{sysfs}/class/hwmon"
    out = []
    for n in numbered(listing(root), "hwmon"):
        hwmon = f"{root}/hwmon{n}"
        folder = _folder(hwmon)
        if folder is None:
            continue
        oem = read_text(f"{folder}/power1_oem_info")
        hw_type, hw_id, rail = classify(oem, _device_name(hwmon, n))
        out.append(Meter(f"{folder}/power1_average", hw_type, hw_id, rail, oem))
    return out


def read_watts(meter: Meter, problems: Problems) -> float | None:
    """The meter's average power in W; None when unreadable, garbage (a problem) or 0."""
    value = read_held_int(meter.average, problems, maximum=MAX_MICRO_WATTS)
    if not value:
        return None
    return value * MICRO


def close(meters: Iterable[Meter]) -> None:
    """Closes the meters' held files (the meters are no longer read)."""
    for meter in meters:
        meter.average.close()
