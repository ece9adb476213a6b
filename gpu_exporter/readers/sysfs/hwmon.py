"""hwmon sensors of a GPU's PCI device (`device/hwmon/hwmonN/`), in base units.

The hwmon ABI (Documentation/hwmon/sysfs-interface.rst): temperatures in m°C, power in
µW, energy in µJ, frequencies in Hz, fan speeds in rpm, pwm 0..255.

A folder is listed once (`find`) and its channels are picked once (`temperature_files`,
...): names, labels and maxima do not change while the driver is bound. What is read
every scrape is the value files those return (`read_each`, `read_ratios`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gpu_exporter.readers.file_values import Problems, listing, numbered, read_int, read_text

MICRO = 1e-6
# Guards against garbage that parses: no GPU sensor reads above these.
MAX_MILLI_CELSIUS = 500_000
MAX_MICRO_WATTS = 100_000 * 1_000_000  # 100 kW
MAX_MICRO_JOULES = 1 << 63
MAX_HERTZ = 100 * 10**9
MAX_RPM = 1_000_000
_MAX_PWM = 65535

# (key, path): a value file and what it is reported under (a sensor, a fan index).
Channel = tuple[str, str]
# (key, path, top): a value reported as value / top, a ratio.
RatioChannel = tuple[str, str, int]


@dataclass(frozen=True)
class Hwmon:
    """One hwmon folder, listed once."""

    path: str
    names: frozenset[str]

    def file(self, name: str) -> str | None:
        """The path of `name` when the folder has it."""
        return f"{self.path}/{name}" if name in self.names else None

    def channels(self, prefix: str, suffix: str) -> list[int]:
        return numbered(self.names, prefix, suffix)

    def label(self, prefix: str, n: int) -> str | None:
        name = f"{prefix}{n}_label"
        return read_text(f"{self.path}/{name}") if name in self.names else None

    def labelled(self, prefix: str, suffix: str) -> dict[str | None, int]:
        """Channel number by label (`energy1_label` = "card" -> {"card": 1}); channels
        without a label file are under None (the lowest one)."""
        out: dict[str | None, int] = {}
        for n in self.channels(prefix, suffix):
            out.setdefault(self.label(prefix, n), n)
        return out


def find(device: str, names: Iterable[str]) -> Hwmon | None:
    """The first hwmon folder of the device whose `name` is one of `names` (the driver's
    own sensors, not e.g. a fan controller on the same board); else the first one."""
    root = f"{device}/hwmon"
    folders = [f"{root}/hwmon{n}" for n in numbered(listing(root), "hwmon")]
    wanted = set(names)
    chosen = next((f for f in folders if read_text(f"{f}/name") in wanted),
                  folders[0] if folders else None)
    return None if chosen is None else Hwmon(chosen, listing(chosen))


def temperature_files(mon: Hwmon, sensor_of: Callable[[str | None], str | None]
                      ) -> tuple[Channel, ...]:
    """(spec sensor, tempN_input) pairs; `sensor_of(label)` maps a `tempN_label` (None
    when the file is missing) to a sensor, or None to leave it out. The first channel
    mapped to a sensor wins."""
    out: dict[str, str] = {}
    for n in mon.channels("temp", "_input"):
        sensor = sensor_of(mon.label("temp", n))
        if sensor is not None and sensor not in out:
            out[sensor] = f"{mon.path}/temp{n}_input"
    return tuple(out.items())


def fan_rpm_files(mon: Hwmon) -> tuple[Channel, ...]:
    """(fan, fanN_input), keyed like NVML's fan index: `fan1_input` is fan "0"."""
    return tuple((str(n - 1), f"{mon.path}/fan{n}_input")
                 for n in mon.channels("fan", "_input"))


def pwm_files(mon: Hwmon, problems: Problems) -> tuple[RatioChannel, ...]:
    """(fan, pwmN, pwmN_max) by fan index ("0" for pwm1); 255 when there is no max."""
    out = []
    for n in mon.channels("pwm", ""):
        top_file = mon.file(f"pwm{n}_max")
        top = read_int(top_file, problems, maximum=_MAX_PWM) if top_file else None
        out.append((str(n - 1), f"{mon.path}/pwm{n}", top or 255))
    return tuple(out)


def fan_of_max_files(mon: Hwmon, problems: Problems) -> tuple[RatioChannel, ...]:
    """(fan, fanN_input, fanN_max), for drivers (xe) whose pwm files do not follow the
    fan in automatic mode; fans without a maximum are left out."""
    out = []
    for fan, path in fan_rpm_files(mon):
        top_file = mon.file(f"fan{int(fan) + 1}_max")
        top = read_int(top_file, problems, maximum=MAX_RPM) if top_file else None
        if top:
            out.append((fan, path, top))
    return tuple(out)


def micro(path: str | None, problems: Problems, maximum: int = MAX_MICRO_WATTS
          ) -> float | None:
    """A µW / µJ file in base units (W / J)."""
    if path is None:
        return None
    value = read_int(path, problems, maximum=maximum)
    return None if value is None else value * MICRO


def read_each(channels: Sequence[Channel], problems: Problems, maximum: int,
              divisor: int = 1) -> dict[str, float]:
    """value / divisor by key (°C from m°C: 1000; rpm: 1)."""
    out: dict[str, float] = {}
    for key, path in channels:
        value = read_int(path, problems, maximum=maximum)
        if value is not None:
            out[key] = value / divisor
    return out


def read_ratios(channels: Sequence[RatioChannel], problems: Problems, *, clamp: bool
                ) -> dict[str, float]:
    """value / top by key. Above top: garbage (pwm), or 1 with `clamp` (a fan spinning
    past its nominal maximum)."""
    out: dict[str, float] = {}
    for key, path, top in channels:
        value = read_int(path, problems, maximum=MAX_RPM if clamp else top)
        if value is not None:
            out[key] = min(1.0, value / top)
    return out
