"""One Gaudi's values through HLML, into a `records.GpuReading` in base units: HLML gives
power in mW (W here), energy in mJ since the driver's last load (J), clocks in MHz (Hz),
utilization in percent (a ratio), memory in bytes. A value HLML does not have for this
device (NOT_SUPPORTED, NOT_FOUND, NO_DATA, or a function the binding or the library
lacks) is absent, never 0.

What is read, and what needs which release: docs/gaudi.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_exporter.model.records import (
    EccSeverity,
    ErrorType,
    GpuIdentity,
    GpuReading,
    HealthState,
    NicLinkState,
    NicScope,
)
from gpu_exporter.sources.hlml.session import HlmlSession, text
from gpu_exporter.sources.library.calls import DeviceCalls

# HLML_TEMPERATURE_SENSORS, named as the `sensor` label of every vendor ("die": the chip).
# HBM and VRM exist from binding 1.16 / drivers of that time; an older library answers
# NOT_SUPPORTED or INVALID_ARGUMENT for them (both left out).
TEMPERATURE_SENSORS: Mapping[str, int] = {"die": 0, "board": 1, "memory": 3, "vrm": 4}
# HLML_CLOCK_TYPE: Gaudi has one clock domain, the SoC's (IC/MME/TPC were Goya's).
CLOCKS: Mapping[str, int] = {"soc": 0}
# HLML_CLOCKS_THROTTLE_REASON_* bits, named as the `reason` label.
THROTTLE_REASONS: Mapping[str, int] = {"power": 0x1, "thermal": 0x2}
_ECC: Mapping[ErrorType, int] = {"corrected": 0, "uncorrected": 1}  # HLML_MEMORY_ERROR_TYPE
_VOLATILE = 0  # HLML_VOLATILE_ECC: since the driver's last load, as NVIDIA's are read
_ROW_CAUSES: Mapping[EccSeverity, int] = {"corrected": 0, "uncorrected": 1}


@dataclass(frozen=True)
class DeviceResult:
    """What one lane job returns: the reading (its identity HLML's), and the failures."""

    reading: GpuReading
    failures: tuple[tuple[str, str], ...]


def identity(session: HlmlSession, call: DeviceCalls, h: Any, pci: GpuIdentity) -> GpuIdentity:
    """The device as HLML names it: hw_id its UUID (as NVML's UUID is NVIDIA's), name and
    serial; the PCI identity `pci` (what the bus shows) fills in what HLML lacks."""
    hl = session.hlml
    uuid = call("hlmlDeviceGetUUID", hl.hlmlDeviceGetUUID, h)
    name = call("hlmlDeviceGetName", hl.hlmlDeviceGetName, h)
    serial = call("hlmlDeviceGetSerial", hl.hlmlDeviceGetSerial, h)
    return GpuIdentity(
        hw_id=text(uuid) if uuid else pci.hw_id,
        name=text(name) if name else pci.name,
        vendor="habana",
        pci_address=pci.pci_address,
        order_key=(0, pci.pci_address or ""),
        model=pci.model,
        driver_version=session.driver_version or pci.driver_version,
        serial_number=text(serial) if serial else None,
    )


def read(session: HlmlSession, pci: GpuIdentity, known: GpuIdentity | None) -> DeviceResult:
    """One device, by PCI address. Raises the binding's error when HLML has no handle for
    it (NOT_FOUND: HLML does not list it), DeviceLost, HlmlGone."""
    assert pci.pci_address is not None
    call = DeviceCalls(pci.pci_address, session.codes)
    hl = session.hlml
    h = session.handle(pci.pci_address)
    ident = known if known is not None else identity(session, call, h, pci)
    reading = GpuReading(identity=ident, up=True, **_values(session, call, hl, h))
    return DeviceResult(reading, tuple(call.failures))


def _values(session: HlmlSession, call: DeviceCalls, hl: Any, h: Any) -> dict[str, Any]:
    util = call("hlmlDeviceGetUtilizationRates", hl.hlmlDeviceGetUtilizationRates, h)
    if util is not None and not isinstance(util, int):
        util = util.aip  # 1.10 returns the AIP percent, later releases the struct
    memory = call("hlmlDeviceGetMemoryInfo", hl.hlmlDeviceGetMemoryInfo, h)
    power = call("hlmlDeviceGetPowerUsage", hl.hlmlDeviceGetPowerUsage, h)
    energy = call("hlmlDeviceGetTotalEnergyConsumption",
                  hl.hlmlDeviceGetTotalEnergyConsumption, h)
    temperatures = {}
    for sensor, number in TEMPERATURE_SENSORS.items():
        celsius = call("hlmlDeviceGetTemperature", _quiet(session, hl.hlmlDeviceGetTemperature),
                       h, number)
        if celsius is not None:
            temperatures[sensor] = float(celsius)
    clocks = {}
    for domain, number in CLOCKS.items():
        mhz = call("hlmlDeviceGetClockInfo", hl.hlmlDeviceGetClockInfo, h, number)
        if mhz is not None:
            clocks[domain] = mhz * 1e6
    reasons = call("hlmlDeviceGetCurrentClocksThrottleReasons",
                   hl.hlmlDeviceGetCurrentClocksThrottleReasons, h)
    throttle = ({name: bool(reasons & bit) for name, bit in THROTTLE_REASONS.items()}
                if reasons is not None else {})
    errors: dict[ErrorType, int] = {}
    for error_type, number in _ECC.items():
        count = call("hlmlDeviceGetTotalECCErrors", hl.hlmlDeviceGetTotalECCErrors,
                     h, number, _VOLATILE)
        if count is not None:
            errors[error_type] = int(count)
    replays = call("hlmlDeviceGetPCIEReplayCounter", hl.hlmlDeviceGetPCIEReplayCounter, h)
    if replays is not None:
        errors["pcie_replay"] = int(replays)
    rows, pending = _replaced_rows(session, call, hl, h)
    return {
        "nic_links": _nic_links(session, call, hl, h),
        "utilization_ratio": {} if util is None else {"general": util / 100.0},
        "memory_usage_bytes": None if memory is None else int(memory.used),
        "memory_limit_bytes": None if memory is None else int(memory.total),
        "power_draw_watts": None if power is None else power / 1000.0,
        "power_limit_watts": _power_limit(session, call, hl, h),
        "energy_consumed_joules": None if energy is None else energy / 1000.0,
        "temperature_celsius": temperatures,
        "clock_hertz": clocks,
        "throttle_active": throttle,
        "errors": errors,
        "remapped_rows": rows,
        "row_remap_pending": pending,
        "state": _health(errors, throttle, pending),
    }


def _quiet(session: HlmlSession, fn: Callable[..., Any]) -> Callable[..., Any]:
    """A sensor an older library does not know answers INVALID_ARGUMENT: absent."""
    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except session.codes.error as exc:
            if getattr(exc, "value", None) == 2:  # INVALID_ARGUMENT
                raise session.codes.error(3) from exc  # NOT_SUPPORTED: absent
            raise
    return call


def _power_limit(session: HlmlSession, call: DeviceCalls, hl: Any, h: Any) -> float | None:
    """The enforced limit (binding and driver 1.2x); before that, the default limit,
    which is the enforced one unless an operator changed it (docs/gaudi.md)."""
    if session.has("hlmlDeviceGetPowerManagementLimit", "hlml_device_get_power_management_limit"):
        mw = call("hlmlDeviceGetPowerManagementLimit", hl.hlmlDeviceGetPowerManagementLimit, h)
    else:
        mw = call("hlmlDeviceGetPowerManagementDefaultLimit",
                  hl.hlmlDeviceGetPowerManagementDefaultLimit, h)
    return None if mw is None else mw / 1000.0


def _replaced_rows(session: HlmlSession, call: DeviceCalls, hl: Any, h: Any
                   ) -> tuple[dict[EccSeverity, int], bool | None]:
    """HBM rows replaced for single-bit errors (corrected) and a double-bit error
    (uncorrected), and whether a replacement waits for the next reset."""
    rows: dict[EccSeverity, int] = {}
    if not session.has("hlmlDeviceGetReplacedRowsCount", "hlml_device_get_replaced_rows"):
        return rows, None
    for severity, cause in _ROW_CAUSES.items():
        count = call("hlmlDeviceGetReplacedRowsCount", hl.hlmlDeviceGetReplacedRowsCount,
                     h, cause)
        if count is not None:
            rows[severity] = int(count)
    pending = None
    if session.has("hlmlDeviceGetReplacedRowsPendingStatus",
                   "hlml_device_get_replaced_rows_pending_status"):
        flag = call("hlmlDeviceGetReplacedRowsPendingStatus",
                    hl.hlmlDeviceGetReplacedRowsPendingStatus, h)
        pending = None if flag is None else bool(flag)
    return rows, pending


def _nic_links(session: HlmlSession, call: DeviceCalls, hl: Any, h: Any
               ) -> dict[tuple[NicScope, NicLinkState], int]:
    """The ports the card has (a 128-bit mask, and which are external: scale-out) by link
    state; every combination counted, 0 included, as NVLink's states are. A port whose
    link cannot be read is left out of the counts."""
    if not session.has("hlmlDeviceGetMacAddrInfo", "hlml_get_mac_addr_info"):
        return {}
    masks = call("hlmlDeviceGetMacAddrInfo", hl.hlmlDeviceGetMacAddrInfo, h)
    if masks is None:
        return {}
    (low, high), (ext_low, ext_high) = masks
    ports, external = low | (high << 64), ext_low | (ext_high << 64)
    if not ports or not session.has("hlmlDeviceNicGetLink", "hlml_nic_get_link"):
        return {}
    out: dict[tuple[NicScope, NicLinkState], int] = {
        (scope, state): 0 for scope in ("external", "internal") for state in ("up", "down")}
    for port in range(128):
        if not ports >> port & 1:
            continue
        up = call("hlmlDeviceNicGetLink", hl.hlmlDeviceNicGetLink, h, port)
        if up is None:
            continue
        scope: NicScope = "external" if external >> port & 1 else "internal"
        out[(scope, "up" if up else "down")] += 1
    return out


def _health(errors: Mapping[ErrorType, int], throttle: Mapping[str, bool],
            pending: bool | None) -> HealthState:
    """As NVIDIA's: failed with uncorrected ECC errors since the driver's load; degraded
    while thermally throttled or while a row replacement waits for a reset."""
    if errors.get("uncorrected", 0) > 0:
        return "failed"
    if throttle.get("thermal") or pending:
        return "degraded"
    return "ok"
