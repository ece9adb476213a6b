"""Intel GPUs (i915 and xe) from sysfs, in base units.

- energy: hwmon `energy1_input` (i915); on xe the `energyN_input` labelled `card` (else
  `pkg`, else the first) (µJ);
- power draw: derived from the energy counter, delta energy / delta time between two
  reads (absent on the first read and after a counter reset);
- power limit: hwmon `power1_max` (i915), `power1_cap` (xe, the `card` channel), else
  `power1_rated_max` (µW; 0 means "no limit": absent);
- temperature: hwmon `tempN_input` (m°C): unlabelled or `pkg` -> die, `vram` -> memory;
- fans: `fanN_input` (rpm) and `fanN_input / fanN_max` as the ratio (xe's pwm files read
  0 while the firmware drives the fan);
- clocks (MHz): i915 `cardN/gt_act_freq_mhz`, else `gt/gt0/rps_act_freq_mhz` -> graphics,
  `gt/gt1/rps_act_freq_mhz` (the media GT) -> video; xe `tile0/gt0/freq0/act_freq` ->
  graphics, a second GT of tile 0 (the media GT) -> video;
- memory limit (xe): `tileN/physical_vram_size_bytes`, summed over tiles;
- utilization: DRM fdinfo (`readers.procfs.fdinfo`), summed over clients by the collector.

hw_id is the PCI address (Intel has no stable unique id in sysfs), so a card that never
answered still has one. Which files a card has is listed once (`Layouts`); a scrape
opens only those. A card none of whose files could be read did not answer: `up=False`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpu_exporter.model.records import GpuIdentity, GpuReading, GpuTask
from gpu_exporter.readers.file_values import (
    Layouts,
    Problems,
    has_values,
    listing,
    numbered,
    read_int,
    read_text,
)
from gpu_exporter.readers.sysfs import hwmon
from gpu_exporter.readers.sysfs.pci import PciGpu, device_name

DRIVERS = ("i915", "xe")
MAX_BYTES = 1 << 50
MAX_MHZ = 100_000


def identity(gpu: PciGpu, sysfs: Path | None = None, *, answered: bool = True
             ) -> GpuIdentity:
    """`answered=False`: a card that has not answered a read in this process yet (lost
    before the exporter started): it sorts after the cards that answered."""
    pci_name = device_name(gpu.vendor_id, gpu.device_id)
    ids = f"{gpu.vendor_id:04x}:{gpu.device_id:04x}" if gpu.device_id is not None else ""
    driver_version = None
    if sysfs is not None and gpu.driver:
        driver_version = read_text(sysfs / "module" / gpu.driver / "version")
    return GpuIdentity(
        hw_id=gpu.pci_address,
        name=f"Intel {pci_name}" if pci_name else f"Intel GPU {ids}".strip(),
        vendor="intel",
        pci_address=gpu.pci_address,
        order_key=(0 if answered else 1, gpu.pci_address),
        model=pci_name or ids or None,
        driver_version=driver_version,
    )


@dataclass(frozen=True)
class _Files:
    """The files one i915/xe card has, as paths; None / () for what it lacks."""

    energy: str | None
    power_limit: tuple[str, ...]  # in order of preference; 0 means "no limit"
    temperatures: tuple[hwmon.Channel, ...]
    fan_rpm: tuple[hwmon.Channel, ...]
    fan_ratio: tuple[hwmon.RatioChannel, ...]
    clocks: tuple[hwmon.Channel, ...]  # (domain, MHz file); the first that reads wins
    vram: tuple[str, ...]  # per tile, summed


def _files(gpu: PciGpu, problems: Problems) -> _Files:
    dev = str(gpu.device_path)
    mon = hwmon.find(dev, DRIVERS)
    return _Files(
        energy=_energy_file(mon) if mon else None,
        power_limit=_power_limit_files(mon) if mon else (),
        temperatures=hwmon.temperature_files(mon, _sensor) if mon else (),
        fan_rpm=hwmon.fan_rpm_files(mon) if mon else (),
        fan_ratio=hwmon.fan_of_max_files(mon, problems) if mon else (),
        clocks=_clock_files(gpu),
        vram=tuple(f"{dev}/tile{n}/physical_vram_size_bytes"
                   for n in numbered(listing(dev), "tile")),
    )


@dataclass(frozen=True)
class _EnergySample:
    joules: float
    at: float  # monotonic seconds


class IntelReader:
    """Reads Intel cards; keeps what each card has (`Layouts`) and its previous energy
    reading, to derive the power draw."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 relist_seconds: float = 30.0) -> None:
        self._clock = clock
        self._layouts: Layouts[_Files] = Layouts(relist_seconds, clock)
        self._energy: dict[str, _EnergySample] = {}

    def forget(self, pci_address: str) -> None:
        self._energy.pop(pci_address, None)
        self._layouts.forget(pci_address)

    def keep_only(self, pci_addresses: set[str]) -> None:
        """Drop the state of cards no longer read (unplugged, out of their grace)."""
        self._layouts.keep_only(pci_addresses)
        for address in [a for a in self._energy if a not in pci_addresses]:
            del self._energy[address]

    def read(
        self,
        gpu: PciGpu,
        ident: GpuIdentity,
        problems: Problems,
        utilization: dict[GpuTask, float] | None = None,
    ) -> GpuReading:
        f = self._layouts.get(gpu.pci_address, lambda: _files(gpu, problems))
        energy = hwmon.micro(f.energy, problems, maximum=hwmon.MAX_MICRO_JOULES)
        reading = GpuReading(
            identity=ident,
            up=True,
            utilization_ratio=dict(utilization or {}),
            memory_limit_bytes=_vram_size(f.vram, problems),
            power_draw_watts=self._power(gpu.pci_address, energy, self._clock()),
            power_limit_watts=_power_limit(f.power_limit, problems),
            energy_consumed_joules=energy,
            temperature_celsius=hwmon.read_each(f.temperatures, problems,
                                                hwmon.MAX_MILLI_CELSIUS, 1000),
            fan_speed_rpm=hwmon.read_each(f.fan_rpm, problems, hwmon.MAX_RPM),
            fan_speed_ratio=hwmon.read_ratios(f.fan_ratio, problems, clamp=True),
            clock_hertz=_clocks(f.clocks, problems),
            state="ok",  # i915/xe expose no error counters in sysfs: answering is all we know
        )
        if not has_values(reading):
            self.forget(gpu.pci_address)
            return GpuReading(identity=ident, up=False, state="failed")
        return reading

    def _power(self, address: str, energy: float | None, now: float) -> float | None:
        if energy is None:
            self._energy.pop(address, None)
            return None
        before = self._energy.get(address)
        self._energy[address] = _EnergySample(energy, now)
        if before is None or now <= before.at or energy < before.joules:
            return None  # first read, or the counter was reset (driver reload)
        return (energy - before.joules) / (now - before.at)


def _sensor(label: str | None) -> str | None:
    if label is None or label == "pkg":
        return "die"
    if label == "vram":
        return "memory"
    return None


def _energy_file(mon: hwmon.Hwmon) -> str | None:
    channels = mon.labelled("energy", "_input")
    for label in ("card", "pkg", None):
        if label in channels:
            return f"{mon.path}/energy{channels[label]}_input"
    if channels:
        return f"{mon.path}/energy{min(channels.values())}_input"
    return None


def _power_limit_files(mon: hwmon.Hwmon) -> tuple[str, ...]:
    channels = mon.labelled("power", "_max") | mon.labelled("power", "_cap")
    n = channels.get("card", channels.get(None))
    if n is None and channels:
        n = min(channels.values())
    if n is None:
        n = 1
    return tuple(p for p in (mon.file(f"power{n}_max"), mon.file(f"power{n}_cap"),
                             mon.file(f"power{n}_rated_max")) if p)


def _power_limit(files: tuple[str, ...], problems: Problems) -> float | None:
    for path in files:
        watts = hwmon.micro(path, problems)
        if watts:  # 0 means "no limit set"
            return watts
    return None


def _vram_size(files: tuple[str, ...], problems: Problems) -> int | None:
    total: int | None = None
    for path in files:
        size = read_int(path, problems, maximum=MAX_BYTES)
        if size is not None:
            total = (total or 0) + size
    return total


def _clock_files(gpu: PciGpu) -> tuple[hwmon.Channel, ...]:
    tile = f"{gpu.device_path}/tile0"
    tile_gts = numbered(listing(tile), "gt")
    if gpu.driver == "xe" or tile_gts:
        return tuple((domain, f"{tile}/gt{gt}/freq0/act_freq")
                     for gt, domain in zip(tile_gts, ("graphics", "video"), strict=False))
    if gpu.card_path is None:
        return ()
    card = str(gpu.card_path)
    out = [("graphics", f"{card}/gt_act_freq_mhz")] if "gt_act_freq_mhz" in listing(card) else []
    gts = numbered(listing(f"{card}/gt"), "gt")
    out += [(domain, f"{card}/gt/gt{gt}/rps_act_freq_mhz")
            for gt, domain in zip(gts, ("graphics", "video"), strict=False)]
    return tuple(out)


def _clocks(files: tuple[hwmon.Channel, ...], problems: Problems) -> dict[str, float]:
    out: dict[str, float] = {}
    for domain, path in files:
        if domain not in out:
            mhz = read_int(path, problems, maximum=MAX_MHZ)
            if mhz is not None:
                out[domain] = mhz * 1e6
    return out
