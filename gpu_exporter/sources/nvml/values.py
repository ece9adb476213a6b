"""One scrape of one GPU and its MIG devices, as `records.GpuReading` in base units:
NVML's own units (mW, mJ, MHz, percent) stop here."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pynvml

from gpu_exporter.model import xid_catalog
from gpu_exporter.model.records import (
    RECOVERY_ACTIONS,
    EccSeverity,
    ErrorType,
    GpmReading,
    GpuReading,
    GpuTask,
    HealthState,
    PcieLink,
    RecoveryAction,
    VgpuLicenseState,
)
from gpu_exporter.sources.nvml import fields, nvlink, pcie
from gpu_exporter.sources.nvml.calls import Calls, DeviceLost, Versions, by_name
from gpu_exporter.sources.nvml.devices import NvmlDevice

# nvmlClocksEventReason* bits, named as the metric's `reason` label.
CLOCK_EVENT_REASONS: Mapping[str, int] = {
    "gpu_idle": pynvml.nvmlClocksEventReasonGpuIdle,
    "applications_clocks_setting": pynvml.nvmlClocksEventReasonApplicationsClocksSetting,
    "sw_power_cap": pynvml.nvmlClocksEventReasonSwPowerCap,
    "hw_slowdown": pynvml.nvmlClocksEventReasonHwSlowdown,
    "sync_boost": pynvml.nvmlClocksEventReasonSyncBoost,
    "sw_thermal": pynvml.nvmlClocksEventReasonSwThermalSlowdown,
    "hw_thermal": pynvml.nvmlClocksEventReasonHwThermalSlowdown,
    "hw_power_brake": pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown,
    "display_clock_setting": pynvml.nvmlClocksEventReasonDisplayClockSetting,
}
# Health rule (docs/nvidia.md, "Health"): failed when lost, when volatile uncorrected ECC errors
# are pending, when row remapping failed, or after an XID whose first action in NVIDIA's
# Xid Catalog is a GPU reset or a reboot (48 double-bit ECC, 79 fallen off the bus, 95
# uncontained ECC, ...); degraded while the hardware slows the clocks down or pages/rows
# wait to be retired/remapped.
FAILED_XID_ACTIONS = frozenset({"reset_gpu", "restart_bm", "workflow_xid_48"})
# The driver's own verdict: a reset or a reboot needed is failed; draining peer traffic
# or recovering the IMEX domain, degraded.
FAILED_RECOVERY = frozenset({"gpu_reset", "node_reboot", "drain_and_reset", "bus_reset",
                             "system_reboot"})
DEGRADED_RECOVERY = frozenset({"drain_p2p", "recover_imex_domain"})
DEGRADED_REASONS = frozenset({"hw_slowdown", "hw_thermal", "hw_power_brake", "sw_thermal"})

_CLOCKS: Mapping[str, int] = {
    "graphics": pynvml.NVML_CLOCK_GRAPHICS,
    "sm": pynvml.NVML_CLOCK_SM,
    "memory": pynvml.NVML_CLOCK_MEM,
    "video": pynvml.NVML_CLOCK_VIDEO,
}
_ERROR_FIELDS: tuple[tuple[ErrorType, str], ...] = (
    ("corrected", "ecc_corrected"), ("uncorrected", "ecc_uncorrected"),
    ("pcie_replay", "pcie_replays"))

# v2 "used" excludes the driver's reservation; v1 on drivers without it.
memory_info = Versions(
    ("nvmlDeviceGetMemoryInfo_v2",
     lambda h: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)),
    ("nvmlDeviceGetMemoryInfo", by_name("nvmlDeviceGetMemoryInfo")),
)
_temperature = Versions.of("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature")
_clock_reasons = Versions.of("nvmlDeviceGetCurrentClocksEventReasons",
                             "nvmlDeviceGetCurrentClocksThrottleReasons")


@dataclass(frozen=True)
class DeviceResult:
    """One physical device at one scrape: its reading, then one per MIG device."""

    readings: tuple[GpuReading, ...]
    failures: tuple[tuple[str, str], ...] = ()
    # The power of the superchip module the GPU sits on (NVML's module scope), W: a value
    # of the module, not of this GPU, so not in its reading.
    module_power_watts: float | None = None


def memory(call: Calls, handle: Any) -> tuple[int | None, int | None, int | None]:
    """(used, total, reserved by the driver) bytes; reserved only from v2."""
    mem = memory_info.read(call, handle)
    if mem is None:
        return None, None, None
    reserved = getattr(mem, "reserved", None)
    return int(mem.used), int(mem.total), None if reserved is None else int(reserved)


_SEVERITIES: tuple[EccSeverity, ...] = ("corrected", "uncorrected")


def recovery_action(value: float | None) -> RecoveryAction | None:
    """NVML's GPU recovery action by its nvml.h number (0..7); any other is unknown."""
    if value is None:
        return None
    code = int(value)
    return RECOVERY_ACTIONS[code] if 0 <= code < len(RECOVERY_ACTIONS) - 1 else "unknown"


def _counts(values: Mapping[str, float], prefix: str) -> dict[EccSeverity, int]:
    out: dict[EccSeverity, int] = {}
    for severity in _SEVERITIES:
        value = values.get(f"{prefix}_{severity}")
        if value is not None:
            out[severity] = int(value)
    return out


def _flag(values: Mapping[str, float], name: str) -> bool | None:
    value = values.get(name)
    return None if value is None else bool(value)


def read(dev: NvmlDevice, xids: Mapping[int, int] | None = None,
         last_xid: int | None = None) -> DeviceResult:
    """One scrape of one physical device and its MIG devices. `xids`: the listener's
    counts for this device (None when it does not listen to it); `last_xid`: the code of
    its last XID (None before the first). Raises NvmlGone."""
    call = Calls(dev.identity.key)
    try:
        gpm = dev.gpm.read(time.monotonic, call.failures) if dev.gpm is not None else ()
        own = {s.device: s.reading for s in gpm if s.gpu_instance_id is None}
        shared = {s.gpu_instance_id: s.reading for s in gpm if s.gpu_instance_id is not None}
        reading, module_watts = _read_physical(
            call, dev, xids, own.get(dev.identity.key), shared, last_xid)
    except DeviceLost as exc:
        call.failures.append((f"{dev.identity.key}:lost",
                              f"GPU {dev.identity.key} is lost: {exc}"))
        return DeviceResult(down(dev, "failed"), tuple(call.failures))
    readings = [reading]
    for mig in dev.migs:
        mig_call = Calls(mig.identity.key)
        try:
            used, total, _ = memory(mig_call, mig.handle)
            gi = mig.instance[0] if mig.instance else None
            readings.append(GpuReading(mig.identity, up=True, memory_usage_bytes=used,
                                       memory_limit_bytes=total, state=reading.state,
                                       gpm=own.get(mig.identity.key),
                                       gpu_instance_gpm=shared.get(gi) if gi is not None
                                       else None))
        except DeviceLost:
            readings.append(GpuReading(mig.identity, up=False, state="failed"))
        call.failures.extend(mig_call.failures)
    return DeviceResult(tuple(readings), tuple(call.failures), module_watts or None)


def down(dev: NvmlDevice, state: HealthState | None = None) -> tuple[GpuReading, ...]:
    """Readings for a device that did not answer (lost, hung): identity only."""
    return tuple(GpuReading(d.identity, up=False, state=state) for d in (dev, *dev.migs))


def _read_physical(call: Calls, dev: NvmlDevice, xids: Mapping[int, int] | None,
                   gpm: GpmReading | None, gpm_instances: Mapping[int, GpmReading],
                   last_xid: int | None = None) -> tuple[GpuReading, float | None]:
    h = dev.handle
    utilization: dict[GpuTask, float] = {}
    controller = None
    rates = call("nvmlDeviceGetUtilizationRates", pynvml.nvmlDeviceGetUtilizationRates, h)
    if rates is not None:
        utilization["general"] = rates.gpu / 100.0
        controller = rates.memory / 100.0
    for task, what, fn in (
        ("encoder", "nvmlDeviceGetEncoderUtilization", pynvml.nvmlDeviceGetEncoderUtilization),
        ("decoder", "nvmlDeviceGetDecoderUtilization", pynvml.nvmlDeviceGetDecoderUtilization),
    ):
        value = call(what, fn, h)
        if value is not None:
            utilization[task] = value[0] / 100.0  # type: ignore[index]
    used, total, reserved = memory(call, h)
    limit = call("nvmlDeviceGetEnforcedPowerLimit", pynvml.nvmlDeviceGetEnforcedPowerLimit, h)
    values = fields.read(call, h, dev.fields)
    temperatures: dict[str, float] = {}
    die = _temperature.read(call, h, pynvml.NVML_TEMPERATURE_GPU)
    if die is not None:
        temperatures["die"] = float(die)
    if "memory_temperature_celsius" in values:
        temperatures["memory"] = float(values["memory_temperature_celsius"])
    fans: dict[str, float] = {}
    for fan in range(dev.num_fans):
        pct = call("nvmlDeviceGetFanSpeed_v2", pynvml.nvmlDeviceGetFanSpeed_v2, h, fan)
        if pct is not None:
            fans[str(fan)] = pct / 100.0
    clocks: dict[str, float] = {}
    for domain, clock_type in _CLOCKS.items():
        mhz = call("nvmlDeviceGetClockInfo", pynvml.nvmlDeviceGetClockInfo, h, clock_type)
        if mhz is not None:
            clocks[domain] = mhz * 1e6
    reasons = _clock_reasons.read(call, h)
    throttle = ({name: bool(reasons & bit) for name, bit in CLOCK_EVENT_REASONS.items()}
                if reasons is not None else {})
    errors: dict[ErrorType, int] = {
        error_type: int(values[name]) for error_type, name in _ERROR_FIELDS if name in values}
    errors.update(pcie.errors(call, values, dev.pci_functions))
    if xids is not None:
        errors["xid"] = sum(xids.values())
    io: dict[Any, int] = {}
    if "pcie_receive_bytes" in values:
        io["receive"] = int(values["pcie_receive_bytes"])
    if "pcie_transmit_bytes" in values:
        io["transmit"] = int(values["pcie_transmit_bytes"])
    return GpuReading(
        identity=dev.identity,
        up=True,
        utilization_ratio=utilization,
        memory_usage_bytes=used,
        memory_limit_bytes=total,
        memory_controller_utilization_ratio=controller,
        power_draw_watts=values.get(fields.POWER_DRAW),
        power_limit_watts=None if limit is None else limit / 1000.0,
        energy_consumed_joules=values.get("energy_joules"),
        temperature_celsius=temperatures,
        fan_speed_ratio=fans,
        clock_hertz=clocks,
        io_bytes=io,
        errors=errors,
        xid_errors=dict(xids or {}),
        last_xid=last_xid if xids is not None else None,
        throttle_active=throttle,
        state=health(errors, throttle, values, xids or {}),
        pcie_link=pcie.link(call, h, dev.pcie_max or PcieLink()),
        nvlink=(nvlink.decode(values, dev.nvlinks, dev.nvlink_per_link)
                if dev.nvlinks else None),
        gpm=gpm,
        gpm_instances=gpm_instances,
        recovery_action=recovery_action(values.get(fields.RECOVERY_ACTION)),
        remapped_rows=_counts(values, "remapped_rows"),
        row_remap_pending=_flag(values, "remapped_rows_pending"),
        row_remap_failure=_flag(values, "remapped_rows_failure"),
        retired_pages=_counts(values, "retired_pages"),
        retired_pages_pending=_flag(values, "retired_pages_pending"),
        memory_reserved_bytes=reserved,
        vgpu_license_state=(vgpu_license(call, h) if dev.vgpu_license is not None
                            and dev.vgpu_license.state == "enabled" else None),
    ), values.get(fields.MODULE_POWER)


def vgpu_license(call: Calls, handle: Any) -> VgpuLicenseState | None:
    """A vGPU guest's licence: the state of its vGPU feature (or of the only feature)."""
    got = call("nvmlDeviceGetGridLicensableFeatures",
               pynvml.nvmlDeviceGetGridLicensableFeatures, handle)
    if got is None or not got.isGridLicenseSupported:
        return None
    features = list(got.gridLicensableFeatures)[:min(int(got.licensableFeaturesCount), 3)]
    vgpu = [f for f in features if f.featureCode == pynvml.NVML_GRID_LICENSE_FEATURE_CODE_VGPU]
    chosen = vgpu or features[:1]
    if not chosen:
        return None
    return "licensed" if chosen[0].featureState else "unlicensed"


def health(
    errors: Mapping[ErrorType, int], throttle: Mapping[str, bool], values: Mapping[str, float],
    xids: Mapping[int, int],
) -> HealthState:
    verdict = recovery_action(values.get(fields.RECOVERY_ACTION))
    if (errors.get("uncorrected", 0) > 0 or values.get("remapped_rows_failure", 0)
            or verdict in FAILED_RECOVERY
            or any(n and xid_catalog.action(x) in FAILED_XID_ACTIONS for x, n in xids.items())):
        return "failed"
    if (any(throttle.get(r) for r in DEGRADED_REASONS)
            or values.get("retired_pages_pending", 0) or values.get("remapped_rows_pending", 0)
            or verdict in DEGRADED_RECOVERY):
        return "degraded"
    return "ok"
