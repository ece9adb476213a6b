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

`pcie_bw` is never read: the driver blocks for a second to measure it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from gpu_exporter.readers import amd_gpu_metrics, hwmon
from gpu_exporter.readers.pci import PciGpu, device_name
from gpu_exporter.readers.sysfs import Problems, parse_int, read_bytes, read_int, read_text
from gpu_exporter.records import ErrorType, GpuIdentity, GpuReading, GpuTask

MAX_BYTES = 1 << 50  # 1 PiB of VRAM: anything above is garbage
_TEMP_SENSORS = {"edge": "edge", "junction": "junction", "mem": "memory"}
_FREQ_DOMAINS = {"sclk": "graphics", "mclk": "memory"}
_DPM_DOMAINS = (("pp_dpm_sclk", "graphics"), ("pp_dpm_mclk", "memory"), ("pp_dpm_vclk", "video"))
_DPM_LEVEL = re.compile(r"^\s*\w+:\s*(\d+)\s*mhz\s*\*", re.IGNORECASE | re.MULTILINE)
_RAS_LINE = re.compile(r"^\s*(ue|ce)\s*:\s*(\S+)\s*$", re.MULTILINE)


def identity(gpu: PciGpu, sysfs: Path | None = None) -> GpuIdentity:
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
        hw_id=unique_id or gpu.pci_address,
        name=name,
        vendor="amd",
        pci_address=gpu.pci_address,
        order_key=(gpu.pci_address,),
        model=pci_name or ids or None,
        driver_version=driver_version,
        firmware_version=read_text(dev / "vbios_version"),
        serial_number=read_text(dev / "serial_number"),
    )


def lost(ident: GpuIdentity) -> GpuReading:
    return GpuReading(identity=ident, up=False, state="failed")


def read(gpu: PciGpu, ident: GpuIdentity, problems: Problems) -> GpuReading:
    """One card once. A card whose folder is gone (before or during the read) is
    `up=False`; a file that is missing is an absent value; garbage is absent and a
    problem."""
    dev = gpu.device_path
    if not dev.is_dir():
        return lost(ident)
    mon = hwmon.find(dev, ("amdgpu",))
    errors = _errors(dev, problems)
    utilization: dict[GpuTask, float] = {}
    busy = _percent(dev / "gpu_busy_percent", problems)
    if busy is not None:
        utilization["general"] = busy
    reading = GpuReading(
        identity=ident,
        up=True,
        utilization_ratio=utilization,
        memory_usage_bytes=read_int(dev / "mem_info_vram_used", problems, maximum=MAX_BYTES),
        memory_limit_bytes=read_int(dev / "mem_info_vram_total", problems, maximum=MAX_BYTES),
        memory_controller_utilization_ratio=_percent(dev / "mem_busy_percent", problems),
        power_draw_watts=_power_draw(mon, problems),
        power_limit_watts=hwmon.micro(mon, "power1_cap", problems) if mon else None,
        energy_consumed_joules=_energy(dev, mon, problems),
        temperature_celsius=(
            hwmon.temperatures(mon, problems, lambda label: _TEMP_SENSORS.get(label or ""))
            if mon else {}
        ),
        fan_speed_ratio=hwmon.fan_pwm_ratio(mon, problems) if mon else {},
        fan_speed_rpm=hwmon.fan_rpm(mon, problems) if mon else {},
        clock_hertz=_clocks(dev, mon, problems),
        errors=errors,
        # as for NVIDIA: uncorrected errors since the driver loaded mean failed
        state="failed" if errors.get("uncorrected") else "ok",
    )
    if not dev.is_dir():  # vanished while we read: what we got is not trustworthy
        return lost(ident)
    return reading


def _percent(path: Path, problems: Problems) -> float | None:
    value = read_int(path, problems, maximum=100)
    return None if value is None else value / 100.0


def _power_draw(mon: Path | None, problems: Problems) -> float | None:
    if mon is None:
        return None
    for name in ("power1_average", "power1_input"):
        watts = hwmon.micro(mon, name, problems)
        if watts is not None:
            return watts
    return None


def _energy(dev: Path, mon: Path | None, problems: Problems) -> float | None:
    if mon is not None:
        joules = hwmon.micro(mon, "energy1_input", problems, maximum=1 << 63)
        if joules is not None:
            return joules
    blob = read_bytes(dev / "gpu_metrics")
    if blob is None:
        return None
    try:
        return amd_gpu_metrics.decode(blob).energy_joules
    except amd_gpu_metrics.GpuMetricsError as exc:
        problems.add(dev / "gpu_metrics", str(exc))
        return None


def _clocks(dev: Path, mon: Path | None, problems: Problems) -> dict[str, float]:
    out: dict[str, float] = {}
    if mon is not None:
        for label, n in hwmon.labelled(mon, "freq", "_input").items():
            domain = _FREQ_DOMAINS.get(label or "")
            if domain is None or domain in out:
                continue
            hz = read_int(mon / f"freq{n}_input", problems, maximum=hwmon.MAX_HERTZ)
            if hz is not None:
                out[domain] = float(hz)
    for name, domain in _DPM_DOMAINS:
        if domain in out:
            continue
        mhz = current_dpm_level_mhz(dev / name, problems)
        if mhz is not None:
            out[domain] = mhz * 1e6
    return out


def current_dpm_level_mhz(path: Path, problems: Problems) -> int | None:
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


def _errors(dev: Path, problems: Problems) -> dict[ErrorType, int]:
    out: dict[ErrorType, int] = {}
    ras = dev / "ras"
    try:
        blocks = sorted(n for n in os.listdir(ras) if n.endswith("_err_count"))
    except OSError:
        blocks = []
    for block in blocks:
        text = read_text(ras / block)
        if text is None:
            continue
        for kind, number in _RAS_LINE.findall(text):
            count = parse_int(number, ras / block, problems)
            if count is None:
                continue
            error_type: ErrorType = "uncorrected" if kind == "ue" else "corrected"
            out[error_type] = out.get(error_type, 0) + count
    replay = read_int(dev / "pcie_replay_count", problems)
    if replay is not None:
        out["pcie_replay"] = replay
    return out
