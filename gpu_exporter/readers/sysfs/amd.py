"""AMD GPUs (amdgpu) from sysfs, in base units.

Sources, all under the PCI device folder (`/sys/class/drm/cardN/device`), units as the
kernel writes them, converted here:

- utilization (general): `gpu_busy_percent` (%); memory controller: `mem_busy_percent`;
- memory usage / limit: `mem_info_vram_used` / `mem_info_vram_total` (bytes);
- power draw: hwmon `power1_average`, else `power1_input` (µW); limit: `power1_cap`;
- energy: hwmon `energy1_input` (µJ), else the `gpu_metrics` accumulator
  (see `amd_gpu_metrics` for the decoded revisions);
- temperature: hwmon `tempN_input` (m°C) by `tempN_label`: edge, junction,
  mem -> memory (other labels are not spec sensors);
- fans: hwmon `fanN_input` (rpm) and `pwmN / pwmN_max` (ratio), fan1 is fan "0";
- clocks: hwmon `freqN_input` (Hz) by label (sclk -> graphics, mclk -> memory), else the
  current (`*`) level of `pp_dpm_sclk` / `pp_dpm_mclk` (MHz); `pp_dpm_vclk` -> video;
- errors: `ras/*_err_count` (`ue:` / `ce:` lines, summed over RAS blocks),
  `pcie_replay_count`;
- identity: `unique_id` (hw_id, else the PCI address), `product_name` (else the pci.ids
  name), `vbios_version`, `serial_number`.

Which of these a card has is listed once (`Layouts`); a scrape opens only those files.
A card none of whose files could be read did not answer: `up=False`.
`pcie_bw` is never read: the driver blocks for a second to measure it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpu_exporter.model.records import ErrorType, GpuIdentity, GpuReading, GpuTask
from gpu_exporter.readers.file_values import (
    Layouts,
    Problems,
    has_values,
    listing,
    parse_int,
    read_bytes,
    read_int,
    read_text,
)
from gpu_exporter.readers.sysfs import amd_gpu_metrics, hwmon
from gpu_exporter.readers.sysfs.pci import PciGpu, device_name

DRIVERS = ("amdgpu",)
MAX_BYTES = 1 << 50  # 1 PiB of VRAM: anything above is garbage
_TEMP_SENSORS = {"edge": "edge", "junction": "junction", "mem": "memory"}
_FREQ_DOMAINS = {"sclk": "graphics", "mclk": "memory"}
_DPM_DOMAINS = (("pp_dpm_sclk", "graphics"), ("pp_dpm_mclk", "memory"), ("pp_dpm_vclk", "video"))
_DPM_LEVEL = re.compile(r"^\s*\w+:\s*(\d+)\s*mhz\s*\*", re.IGNORECASE | re.MULTILINE)
_RAS_LINE = re.compile(r"^\s*(ue|ce)\s*:\s*(\S+)\s*$", re.MULTILINE)


def identity(gpu: PciGpu, sysfs: Path | None = None, *, answered: bool = True
             ) -> GpuIdentity:
    """`answered=False`: a card that has not answered a read in this process yet (lost
    before the exporter started). Its hw_id is its `unique_id` if that file still reads,
    else unknown (None: not the PCI address, which a card with a unique_id would never
    have had), and it sorts after the cards that answered."""
    dev = gpu.device_path
    unique_id = read_text(dev / "unique_id")
    pci_name = device_name(gpu.vendor_id, gpu.device_id)
    product = read_text(dev / "product_name")
    ids = f"{gpu.vendor_id:04x}:{gpu.device_id:04x}" if gpu.device_id is not None else ""
    name = product or (f"AMD {pci_name}" if pci_name else f"AMD GPU {ids}".strip())
    driver_version = None
    if sysfs is not None and gpu.driver:
        driver_version = read_text(sysfs / "module" / gpu.driver / "version")
    return GpuIdentity(
        hw_id=unique_id or (gpu.pci_address if answered else None),
        name=name,
        vendor="amd",
        pci_address=gpu.pci_address,
        order_key=(0 if answered else 1, gpu.pci_address),
        model=pci_name or ids or None,
        driver_version=driver_version,
        firmware_version=read_text(dev / "vbios_version"),
        serial_number=read_text(dev / "serial_number"),
    )


# A clock file and how its content becomes Hz.
_ClockFile = tuple[str, str, Callable[[str, Problems], float | None]]


@dataclass(frozen=True)
class _Files:
    """The files one amdgpu card has, as paths; None / () for what it lacks."""

    busy: str | None
    vram_used: str | None
    vram_total: str | None
    mem_busy: str | None
    power: tuple[str, ...]  # in order of preference
    power_cap: str | None
    energy: str | None  # hwmon energy1_input
    gpu_metrics: str | None
    temperatures: tuple[hwmon.Channel, ...]
    fan_ratio: tuple[hwmon.RatioChannel, ...]
    fan_rpm: tuple[hwmon.Channel, ...]
    clocks: tuple[_ClockFile, ...]  # by preference: the first that reads wins a domain
    ras: tuple[str, ...]
    pcie_replay: str | None


def _files(gpu: PciGpu, problems: Problems) -> _Files:
    dev = str(gpu.device_path)
    names = listing(dev)

    def has(name: str) -> str | None:
        return f"{dev}/{name}" if name in names else None

    mon = hwmon.find(dev, DRIVERS)
    clocks: list[_ClockFile] = []
    if mon is not None:
        for label, n in mon.labelled("freq", "_input").items():
            domain = _FREQ_DOMAINS.get(label or "")
            if domain is not None:
                clocks.append((domain, f"{mon.path}/freq{n}_input", _hertz))
    clocks += [(domain, f"{dev}/{name}", _dpm_hertz)
               for name, domain in _DPM_DOMAINS if name in names]
    ras = f"{dev}/ras"
    return _Files(
        busy=has("gpu_busy_percent"),
        vram_used=has("mem_info_vram_used"),
        vram_total=has("mem_info_vram_total"),
        mem_busy=has("mem_busy_percent"),
        power=tuple(p for p in (mon.file("power1_average"), mon.file("power1_input"))
                    if p) if mon else (),
        power_cap=mon.file("power1_cap") if mon else None,
        energy=mon.file("energy1_input") if mon else None,
        gpu_metrics=has("gpu_metrics"),
        temperatures=hwmon.temperature_files(
            mon, lambda label: _TEMP_SENSORS.get(label or "")) if mon else (),
        fan_ratio=hwmon.pwm_files(mon, problems) if mon else (),
        fan_rpm=hwmon.fan_rpm_files(mon) if mon else (),
        clocks=tuple(clocks),
        ras=tuple(f"{ras}/{n}" for n in sorted(listing(ras)) if n.endswith("_err_count")),
        pcie_replay=has("pcie_replay_count"),
    )


class AmdReader:
    """Reads amdgpu cards; keeps what each card has (`Layouts`) between scrapes."""

    def __init__(self, relist_seconds: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._layouts: Layouts[_Files] = Layouts(relist_seconds, clock)

    def keep_only(self, pci_addresses: set[str]) -> None:
        self._layouts.keep_only(pci_addresses)

    def read(self, gpu: PciGpu, ident: GpuIdentity, problems: Problems) -> GpuReading:
        """One card once. A file that is missing is an absent value; garbage is absent
        and a problem; a card none of whose files could be read is `up=False` (and is
        listed afresh on the next read)."""
        f = self._layouts.get(gpu.pci_address, lambda: _files(gpu, problems))
        utilization: dict[GpuTask, float] = {}
        busy = _percent(f.busy, problems)
        if busy is not None:
            utilization["general"] = busy
        errors = _errors(f, problems)
        reading = GpuReading(
            identity=ident,
            up=True,
            utilization_ratio=utilization,
            memory_usage_bytes=_bytes(f.vram_used, problems),
            memory_limit_bytes=_bytes(f.vram_total, problems),
            memory_controller_utilization_ratio=_percent(f.mem_busy, problems),
            power_draw_watts=_first_micro(f.power, problems),
            power_limit_watts=hwmon.micro(f.power_cap, problems),
            energy_consumed_joules=_energy(f, problems),
            temperature_celsius=hwmon.read_each(f.temperatures, problems,
                                                hwmon.MAX_MILLI_CELSIUS, 1000),
            fan_speed_ratio=hwmon.read_ratios(f.fan_ratio, problems, clamp=False),
            fan_speed_rpm=hwmon.read_each(f.fan_rpm, problems, hwmon.MAX_RPM),
            clock_hertz=_clocks(f.clocks, problems),
            errors=errors,
            # as for NVIDIA: uncorrected errors since the driver loaded mean failed
            state="failed" if errors.get("uncorrected") else "ok",
        )
        if not has_values(reading):
            self._layouts.forget(gpu.pci_address)
            return GpuReading(identity=ident, up=False, state="failed")
        return reading


def _percent(path: str | None, problems: Problems) -> float | None:
    if path is None:
        return None
    value = read_int(path, problems, maximum=100)
    return None if value is None else value / 100.0


def _bytes(path: str | None, problems: Problems) -> int | None:
    return None if path is None else read_int(path, problems, maximum=MAX_BYTES)


def _first_micro(paths: tuple[str, ...], problems: Problems) -> float | None:
    for path in paths:
        value = hwmon.micro(path, problems)
        if value is not None:
            return value
    return None


def _energy(f: _Files, problems: Problems) -> float | None:
    joules = hwmon.micro(f.energy, problems, maximum=hwmon.MAX_MICRO_JOULES)
    if joules is not None or f.gpu_metrics is None:
        return joules
    blob = read_bytes(f.gpu_metrics)
    if blob is None:
        return None
    try:
        return amd_gpu_metrics.decode(blob).energy_joules
    except amd_gpu_metrics.GpuMetricsError as exc:
        problems.add(f.gpu_metrics, str(exc))
        return None


def _clocks(files: tuple[_ClockFile, ...], problems: Problems) -> dict[str, float]:
    out: dict[str, float] = {}
    for domain, path, hertz_of in files:
        if domain not in out:
            hz = hertz_of(path, problems)
            if hz is not None:
                out[domain] = hz
    return out


def _hertz(path: str, problems: Problems) -> float | None:
    hz = read_int(path, problems, maximum=hwmon.MAX_HERTZ)
    return None if hz is None else float(hz)


def _dpm_hertz(path: str, problems: Problems) -> float | None:
    mhz = current_dpm_level_mhz(path, problems)
    return None if mhz is None else mhz * 1e6


def current_dpm_level_mhz(path: Path | str, problems: Problems) -> int | None:
    """The level marked `*` in a `pp_dpm_*` table (`1: 2660Mhz *`); with several
    marked (one per instance), the first."""
    text = read_text(path)
    if text is None:
        return None
    m = _DPM_LEVEL.search(text)
    if m is None:
        if "*" in text:
            problems.add(path, f"no readable current level in {text[:60]!r}")
        return None
    return parse_int(m.group(1), path, problems, maximum=hwmon.MAX_HERTZ // 10**6)


def _errors(f: _Files, problems: Problems) -> dict[ErrorType, int]:
    out: dict[ErrorType, int] = {}
    for block in f.ras:
        text = read_text(block)
        if text is None:
            continue
        for kind, number in _RAS_LINE.findall(text):
            count = parse_int(number, block, problems)
            if count is None:
                continue
            error_type: ErrorType = "uncorrected" if kind == "ue" else "corrected"
            out[error_type] = out.get(error_type, 0) + count
    if f.pcie_replay is not None:
        replay = read_int(f.pcie_replay, problems)
        if replay is not None:
            out["pcie_replay"] = replay
    return out
