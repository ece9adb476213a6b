"""hwmon sensors of a GPU's PCI device (`device/hwmon/hwmonN/`), in base units.

The hwmon ABI (Documentation/hwmon/sysfs-interface.rst): temperatures in m°C, power in
µW, energy in µJ, frequencies in Hz, fan speeds in rpm, pwm 0..255.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from gpu_exporter.readers.sysfs import Problems, numbered, read_int, read_text

MICRO = 1e-6
# Guards against garbage that parses: no GPU sensor reads above these.
MAX_MILLI_CELSIUS = 500_000
MAX_MICRO_WATTS = 100_000 * 1_000_000  # 100 kW
MAX_HERTZ = 100 * 10**9
MAX_RPM = 1_000_000


def find(device: Path, names: Iterable[str]) -> Path | None:
    """The first hwmon folder of the device whose `name` is one of `names` (the driver's
    own sensors, not e.g. a fan controller on the same board); else the first one."""
    folders = [device / "hwmon" / f"hwmon{n}" for n in numbered(device / "hwmon", "hwmon")]
    wanted = set(names)
    for folder in folders:
        if read_text(folder / "name") in wanted:
            return folder
    return folders[0] if folders else None


def micro(folder: Path, name: str, problems: Problems, maximum: int = MAX_MICRO_WATTS
          ) -> float | None:
    """A µW / µJ file in base units (W / J)."""
    value = read_int(folder / name, problems, maximum=maximum)
    return None if value is None else value * MICRO


def temperatures(
    folder: Path, problems: Problems, sensor_of: Callable[[str | None], str | None]
) -> dict[str, float]:
    """°C by spec sensor name; `sensor_of(label)` maps a `tempN_label` (None when the
    file is missing) to a sensor, or None to leave it out. The first channel mapped to a
    sensor wins."""
    out: dict[str, float] = {}
    for n in numbered(folder, "temp", "_input"):
        sensor = sensor_of(read_text(folder / f"temp{n}_label"))
        if sensor is None or sensor in out:
            continue
        milli = read_int(folder / f"temp{n}_input", problems, maximum=MAX_MILLI_CELSIUS)
        if milli is not None:
            out[sensor] = milli / 1000.0
    return out


def fan_rpm(folder: Path, problems: Problems) -> dict[str, float]:
    """rpm by fan, keyed like NVML's fan index: `fan1_input` is fan "0"."""
    out: dict[str, float] = {}
    for n in numbered(folder, "fan", "_input"):
        rpm = read_int(folder / f"fan{n}_input", problems, maximum=MAX_RPM)
        if rpm is not None:
            out[str(n - 1)] = float(rpm)
    return out


def fan_pwm_ratio(folder: Path, problems: Problems) -> dict[str, float]:
    """pwmN / pwmN_max (255 when there is no max file) by fan index ("0" for pwm1)."""
    out: dict[str, float] = {}
    for n in numbered(folder, "pwm", ""):
        top = read_int(folder / f"pwm{n}_max", problems, maximum=65535)
        if top is None or top == 0:
            top = 255
        pwm = read_int(folder / f"pwm{n}", problems, maximum=top)
        if pwm is not None:
            out[str(n - 1)] = pwm / top
    return out


def fan_speed_of_max(folder: Path, problems: Problems) -> dict[str, float]:
    """fanN_input / fanN_max by fan index, for drivers (xe) whose pwm files do not follow
    the fan in automatic mode."""
    out: dict[str, float] = {}
    for n in numbered(folder, "fan", "_input"):
        top = read_int(folder / f"fan{n}_max", problems, maximum=MAX_RPM)
        rpm = read_int(folder / f"fan{n}_input", problems, maximum=MAX_RPM)
        if top and rpm is not None:
            out[str(n - 1)] = min(1.0, rpm / top)
    return out


def labelled(folder: Path, prefix: str, suffix: str) -> dict[str | None, int]:
    """Channel number by label (`energy1_label` = "card" -> {"card": 1}); channels
    without a label file are under None (the lowest one)."""
    out: dict[str | None, int] = {}
    for n in numbered(folder, prefix, suffix):
        label = read_text(folder / f"{prefix}{n}_label")
        out.setdefault(label, n)
    return out
