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
- utilization: DRM fdinfo (`readers.fdinfo`), summed over clients by the collector.

hw_id is the PCI address (Intel has no stable unique id in sysfs).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpu_exporter.readers import hwmon
from gpu_exporter.readers.pci import PciGpu, device_name
from gpu_exporter.readers.sysfs import Problems, numbered, read_int, read_text
from gpu_exporter.records import GpuIdentity, GpuReading, GpuTask

MAX_BYTES = 1 << 50
MAX_MHZ = 100_000


def identity(gpu: PciGpu, sysfs: Path | None = None) -> GpuIdentity:
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
        order_key=(gpu.pci_address,),
        model=pci_name or ids or None,
        driver_version=driver_version,
    )


@dataclass(frozen=True)
class _EnergySample:
    joules: float
    at: float  # monotonic seconds


class IntelReader:
    """Reads Intel cards; keeps the previous energy reading of each card to derive the
    power draw."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._energy: dict[str, _EnergySample] = {}

    def forget(self, pci_address: str) -> None:
        self._energy.pop(pci_address, None)

    def keep_only(self, pci_addresses: set[str]) -> None:
        """Drop the state of cards no longer read (unplugged, out of their grace)."""
        for address in [a for a in self._energy if a not in pci_addresses]:
            del self._energy[address]

    def read(
        self,
        gpu: PciGpu,
        ident: GpuIdentity,
        problems: Problems,
        utilization: dict[GpuTask, float] | None = None,
    ) -> GpuReading:
        dev = gpu.device_path
        if not dev.is_dir():
            self.forget(gpu.pci_address)
            return GpuReading(identity=ident, up=False, state="failed")
        mon = hwmon.find(dev, ("i915", "xe"))
        energy = _energy(mon, problems) if mon else None
        now = self._clock()
        power = self._power(gpu.pci_address, energy, now)
        reading = GpuReading(
            identity=ident,
            up=True,
            utilization_ratio=dict(utilization or {}),
            memory_limit_bytes=_vram_size(dev, problems),
            power_draw_watts=power,
            power_limit_watts=_power_limit(mon, problems) if mon else None,
            energy_consumed_joules=energy,
            temperature_celsius=hwmon.temperatures(mon, problems, _sensor) if mon else {},
            fan_speed_rpm=hwmon.fan_rpm(mon, problems) if mon else {},
            fan_speed_ratio=hwmon.fan_speed_of_max(mon, problems) if mon else {},
            clock_hertz=_clocks(gpu, problems),
            state="ok",  # i915/xe expose no error counters in sysfs: answering is all we know
        )
        if not dev.is_dir():
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


def _energy(mon: Path, problems: Problems) -> float | None:
    channels = hwmon.labelled(mon, "energy", "_input")
    for label in ("card", "pkg", None):
        if label in channels:
            return hwmon.micro(mon, f"energy{channels[label]}_input", problems,
                               maximum=1 << 63)
    if channels:
        n = min(channels.values())
        return hwmon.micro(mon, f"energy{n}_input", problems, maximum=1 << 63)
    return None


def _power_limit(mon: Path, problems: Problems) -> float | None:
    channels = hwmon.labelled(mon, "power", "_max") | hwmon.labelled(mon, "power", "_cap")
    n = channels.get("card", channels.get(None))
    if n is None and channels:
        n = min(channels.values())
    if n is None:
        n = 1
    for name in (f"power{n}_max", f"power{n}_cap", f"power{n}_rated_max"):
        watts = hwmon.micro(mon, name, problems)
        if watts:  # 0 means "no limit set"
            return watts
    return None


def _vram_size(dev: Path, problems: Problems) -> int | None:
    total: int | None = None
    for tile in numbered(dev, "tile"):
        size = read_int(dev / f"tile{tile}" / "physical_vram_size_bytes", problems,
                        maximum=MAX_BYTES)
        if size is not None:
            total = (total or 0) + size
    return total


def _clocks(gpu: PciGpu, problems: Problems) -> dict[str, float]:
    out: dict[str, float] = {}
    if gpu.driver == "xe" or (gpu.device_path / "tile0").is_dir():
        tile = gpu.device_path / "tile0"
        gts = numbered(tile, "gt")
        for gt, domain in zip(gts, ("graphics", "video"), strict=False):
            mhz = read_int(tile / f"gt{gt}" / "freq0" / "act_freq", problems, maximum=MAX_MHZ)
            if mhz is not None:
                out[domain] = mhz * 1e6
        return out
    card = gpu.card_path
    if card is None:
        return out
    mhz = read_int(card / "gt_act_freq_mhz", problems, maximum=MAX_MHZ)
    if mhz is not None:
        out["graphics"] = mhz * 1e6
    for gt, domain in zip(numbered(card / "gt", "gt"), ("graphics", "video"), strict=False):
        if domain in out:
            continue
        mhz = read_int(card / "gt" / f"gt{gt}" / "rps_act_freq_mhz", problems, maximum=MAX_MHZ)
        if mhz is not None:
            out[domain] = mhz * 1e6
    return out
