"""NVIDIA GPUs through NVML (the `nvidia-ml-py` bindings over libnvidia-ml.so.1).

Identity is read once per NVML session (`discover`), values on every scrape (`read`),
XID events by a listener thread (`XidListener`). Everything comes out in base units as
`records.GpuReading`; NVML's own units (mW, mJ, MHz, percent) stop here.

Errors, by NVML return code:
- NOT_SUPPORTED, FUNCTION_NOT_FOUND (an older driver), NOT_FOUND: the value is absent,
  silently: the hardware does not have it.
- GPU_IS_LOST, UNKNOWN: the device is lost this scrape (`up=False`, state failed); the
  other devices are unaffected.
- UNINITIALIZED, DRIVER_NOT_LOADED: NVML itself is gone (driver unloaded): `NvmlGone`,
  the caller re-initialises.
- anything else on one value: that value is absent and a failure is reported.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pynvml

from gpu_exporter.records import ErrorType, GpuIdentity, GpuReading, GpuTask, HealthState

log = logging.getLogger("gpu_exporter.nvidia")
T = TypeVar("T")

_ABSENT = frozenset({
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    pynvml.NVML_ERROR_NOT_FOUND,
})
_LOST = frozenset({pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_UNKNOWN})
_GONE = frozenset({pynvml.NVML_ERROR_UNINITIALIZED, pynvml.NVML_ERROR_DRIVER_NOT_LOADED})

# nvmlClocksEventReason* bits, named as the metric's `reason` label.
CLOCK_EVENT_REASONS: Mapping[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clock_setting": 0x100,
}
# Health rule (README "NVIDIA"): failed when lost, when volatile uncorrected ECC errors
# are pending, when row remapping failed, or after an XID that means the GPU needs a
# reset (48 double-bit ECC, 79 fallen off the bus, 95 uncontained ECC); degraded while
# the hardware slows the clocks down or pages/rows wait to be retired/remapped.
FAILED_XIDS = frozenset({48, 79, 95})
DEGRADED_REASONS = frozenset({"hw_slowdown", "hw_thermal", "hw_power_brake", "sw_thermal"})

_CLOCKS: Mapping[str, int] = {
    "graphics": pynvml.NVML_CLOCK_GRAPHICS,
    "sm": pynvml.NVML_CLOCK_SM,
    "memory": pynvml.NVML_CLOCK_MEM,
    "video": pynvml.NVML_CLOCK_VIDEO,
}

# One nvmlDeviceGetFieldValues call instead of seven single calls.
FI_ECC_CORRECTED = 3  # NVML_FI_DEV_ECC_SBE_VOL_TOTAL
FI_ECC_UNCORRECTED = 4  # NVML_FI_DEV_ECC_DBE_VOL_TOTAL
FI_RETIRED_PENDING = 31
FI_MEMORY_TEMP = 82
FI_ENERGY = 83  # mJ since the driver loaded
FI_PCIE_REPLAY = 94
FI_REMAPPED_PENDING = 144
FI_REMAPPED_FAILURE = 145
FI_PCIE_TX_BYTES = 197
FI_PCIE_RX_BYTES = 198
_FIELDS = (
    FI_ECC_CORRECTED, FI_ECC_UNCORRECTED, FI_RETIRED_PENDING, FI_MEMORY_TEMP, FI_ENERGY,
    FI_PCIE_REPLAY, FI_REMAPPED_PENDING, FI_REMAPPED_FAILURE, FI_PCIE_TX_BYTES,
    FI_PCIE_RX_BYTES,
)
# ctypes' own attribute access: pynvml's structures override it to decode bytes, which
# these numeric members never are, at several times the cost, nine fields a GPU a scrape.
_plain_attribute = ctypes.Structure.__getattribute__
_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                 6: "usVal"}


class NvmlUnavailable(Exception):
    """NVML cannot be used on this host now: the message says why (for `doctor`)."""


class NvmlGone(Exception):
    """NVML stopped answering as a whole (driver unloaded): re-initialise."""


class DeviceLost(Exception):
    """This device stopped answering (GPU_IS_LOST, UNKNOWN)."""


@dataclass(frozen=True)
class NvmlDevice:
    """A GPU (or MIG device) found at discovery, with its static identity."""

    identity: GpuIdentity
    handle: Any  # pynvml c_nvmlDevice_t
    index: int
    num_fans: int = 0
    migs: tuple[NvmlDevice, ...] = ()


@dataclass(frozen=True)
class DeviceResult:
    """One physical device at one scrape: its reading, then one per MIG device."""

    readings: tuple[GpuReading, ...]
    failures: tuple[tuple[str, str], ...] = ()


# ---- session --------------------------------------------------------------------------
def init() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(_init_reason(exc)) from None


def _init_reason(exc: pynvml.NVMLError) -> str:
    code = exc.value
    if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return "NVML library libnvidia-ml.so.1 not found (no NVIDIA driver installed)"
    if code == pynvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return "NVIDIA driver not loaded"
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        return "no permission to use NVML (check /dev/nvidia* access)"
    if code == pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return "NVML library and kernel driver versions differ (reboot or reload the driver)"
    return f"NVML initialisation failed: {exc}"


def shutdown() -> None:
    with contextlib.suppress(pynvml.NVMLError):  # already gone: nothing to release
        pynvml.nvmlShutdown()


def driver_version() -> str | None:
    try:
        return str(pynvml.nvmlSystemGetDriverVersion())
    except pynvml.NVMLError as exc:
        if exc.value in _GONE:
            raise NvmlGone(str(exc)) from None
        return None


def normalise_pci(bus_id: str) -> str | None:
    """NVML `00000000:3B:00.0` to sysfs form `0000:3b:00.0`."""
    parts = bus_id.strip().split(":")
    if len(parts) != 3:
        return None
    domain, bus, devfn = parts
    try:
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{devfn.lower()}"
    except ValueError:
        return None


def device_count() -> int:
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError as exc:
        if exc.value in _GONE:
            raise NvmlGone(str(exc)) from None
        raise NvmlUnavailable(f"cannot count NVIDIA devices: {exc}") from None


class IdentityUnreadable(Exception):
    """A GPU NVML lists but whose identity cannot be read: without a UUID it cannot be
    named, so it is not reported until it can be."""


def discover() -> list[NvmlDevice]:
    """Every GPU NVML lists, with its MIG devices, one after the other (the collector
    does the same per GPU on its workers, under a deadline)."""
    version = driver_version()
    devices = []
    for index in range(device_count()):
        try:
            devices.append(discover_one(index, version))
        except IdentityUnreadable as exc:
            log.warning("%s", exc)
    return devices


def discover_one(index: int, version: str | None) -> NvmlDevice:
    """Identity of GPU `index` and its MIG devices. Raises IdentityUnreadable, NvmlGone."""
    try:
        return _discover_one(index, version)
    except pynvml.NVMLError as exc:
        if exc.value in _GONE:
            raise NvmlGone(str(exc)) from None
        raise IdentityUnreadable(
            f"NVIDIA device {index}: its identity cannot be read: {exc}") from None


def _optional(fn: Callable[..., T], *args: Any) -> T | None:
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        if exc.value in _ABSENT:
            return None
        raise


def _discover_one(index: int, version: str | None) -> NvmlDevice:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    uuid = str(pynvml.nvmlDeviceGetUUID(handle))
    name = str(pynvml.nvmlDeviceGetName(handle))
    pci = pynvml.nvmlDeviceGetPciInfo(handle)
    bus_id = pci.busId.decode() if isinstance(pci.busId, bytes) else str(pci.busId)
    serial = _optional(pynvml.nvmlDeviceGetSerial, handle)
    vbios = _optional(pynvml.nvmlDeviceGetVbiosVersion, handle)
    part = _optional(pynvml.nvmlDeviceGetBoardPartNumber, handle)
    num_fans = _optional(pynvml.nvmlDeviceGetNumFans, handle) or 0
    identity = GpuIdentity(
        hw_id=uuid, name=name, vendor="nvidia", pci_address=normalise_pci(bus_id),
        order_key=(index,), model=str(part) if part else None, driver_version=version,
        firmware_version=str(vbios) if vbios else None,
        serial_number=str(serial) if serial else None,
    )
    return NvmlDevice(identity, handle, index, int(num_fans), _discover_migs(handle, identity))


def _discover_migs(handle: Any, parent: GpuIdentity) -> tuple[NvmlDevice, ...]:
    mode = _optional(pynvml.nvmlDeviceGetMigMode, handle)
    if not mode or mode[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
        return ()
    migs = []
    for slot in range(_optional(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError as exc:
            if exc.value in (pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_ERROR_INVALID_ARGUMENT):
                continue  # an empty slot
            raise
        name = str(pynvml.nvmlDeviceGetName(mig))
        # Drivers name MIG devices "<parent name> MIG <profile>".
        _, sep, profile = name.rpartition(" MIG ")
        gi = _optional(pynvml.nvmlDeviceGetGpuInstanceId, mig)
        ci = _optional(pynvml.nvmlDeviceGetComputeInstanceId, mig)
        identity = GpuIdentity(
            hw_id=str(pynvml.nvmlDeviceGetUUID(mig)), name=parent.name, vendor="nvidia",
            pci_address=parent.pci_address,
            order_key=(*parent.order_key, slot, gi if gi is not None else -1,
                       ci if ci is not None else -1),
            model=parent.model, driver_version=parent.driver_version,
            firmware_version=parent.firmware_version, parent_hw_id=parent.hw_id,
            mig_profile=profile if sep else None,
        )
        migs.append(NvmlDevice(identity, mig, slot))
    return tuple(migs)


# ---- readings -------------------------------------------------------------------------
@dataclass
class _Calls:
    """Runs NVML calls for one device and sorts their errors (module docstring)."""

    hw_id: str
    failures: list[tuple[str, str]] = field(default_factory=list)

    def check(self, what: str, code: int, exc: BaseException | None = None) -> None:
        if code in _ABSENT:
            return
        if code in _LOST:
            raise DeviceLost(f"{what}: {exc or code}")
        if code in _GONE:
            raise NvmlGone(f"{what}: {exc or code}")
        self.failures.append(
            (f"{self.hw_id}:{what}", f"{what} failed on {self.hw_id}: {exc or code}")
        )

    def __call__(self, what: str, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            self.check(what, exc.value, exc)
            return None


class _Newest:
    """Calls the newest version of an NVML function the library has. A version an old
    driver lacks (FUNCTION_NOT_FOUND, or a struct version it does not know) is skipped
    from then on, so the fallback costs one failed call, not one per scrape."""

    _MISSING = (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)

    def __init__(self, *versions: tuple[str, Callable[..., Any] | None]) -> None:
        # A version the bindings themselves lack is skipped from the start.
        self._versions = [(name, fn) for name, fn in versions if fn is not None]
        self._lock = threading.Lock()  # GPUs are read on several lanes at once

    def __call__(self, call: _Calls, *args: Any) -> Any:
        while len(self._versions) > 1:
            name, fn = self._versions[0]
            try:
                return fn(*args)
            except pynvml.NVMLError as exc:
                if exc.value not in self._MISSING:
                    call.check(name, exc.value, exc)
                    return None
                with self._lock:
                    if self._versions[0][0] == name:  # not already dropped by another lane
                        self._versions.pop(0)
        name, fn = self._versions[0]
        return call(name, fn, *args)


# v2 "used" excludes the driver's reservation; v1 on drivers without it.
_memory_info = _Newest(
    ("nvmlDeviceGetMemoryInfo_v2",
     lambda h: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)),
    ("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo),
)
_temperature_info = _Newest(
    ("nvmlDeviceGetTemperatureV", getattr(pynvml, "nvmlDeviceGetTemperatureV", None)),
    ("nvmlDeviceGetTemperature", pynvml.nvmlDeviceGetTemperature),
)
_clock_reasons_info = _Newest(
    ("nvmlDeviceGetCurrentClocksEventReasons",
     getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)),
    ("nvmlDeviceGetCurrentClocksThrottleReasons",
     pynvml.nvmlDeviceGetCurrentClocksThrottleReasons),
)


def _memory(call: _Calls, handle: Any) -> tuple[int | None, int | None]:
    """(used, total) bytes."""
    mem = _memory_info(call, handle)
    return (int(mem.used), int(mem.total)) if mem is not None else (None, None)


def _temperature(call: _Calls, handle: Any) -> int | None:
    value = _temperature_info(call, handle, pynvml.NVML_TEMPERATURE_GPU)
    return None if value is None else int(value)


def _clock_reasons(call: _Calls, handle: Any) -> int | None:
    value = _clock_reasons_info(call, handle)
    return None if value is None else int(value)


def _fields(call: _Calls, handle: Any) -> dict[int, float]:
    """The batched counters; on a library without nvmlDeviceGetFieldValues, the few that
    have a function of their own."""
    try:
        values = pynvml.nvmlDeviceGetFieldValues(handle, list(_FIELDS))
    except pynvml.NVMLError as exc:
        if exc.value != pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            call.check("nvmlDeviceGetFieldValues", exc.value, exc)
            return {}
        return _fields_one_by_one(call, handle)
    out: dict[int, float] = {}
    get = _plain_attribute
    for fv in values:
        returned = get(fv, "nvmlReturn")
        if returned != pynvml.NVML_SUCCESS:
            call.check(f"field {get(fv, 'fieldId')}", returned)
            continue
        member = _VALUE_MEMBER.get(get(fv, "valueType"))
        if member is not None:
            out[int(get(fv, "fieldId"))] = getattr(get(fv, "value"), member)
    return out


def _fields_one_by_one(call: _Calls, handle: Any) -> dict[int, float]:
    out: dict[int, float] = {}
    singles: tuple[tuple[int, str, Callable[..., Any], tuple[Any, ...]], ...] = (
        (FI_ENERGY, "nvmlDeviceGetTotalEnergyConsumption",
         pynvml.nvmlDeviceGetTotalEnergyConsumption, ()),
        (FI_ECC_CORRECTED, "nvmlDeviceGetTotalEccErrors", pynvml.nvmlDeviceGetTotalEccErrors,
         (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC)),
        (FI_ECC_UNCORRECTED, "nvmlDeviceGetTotalEccErrors",
         pynvml.nvmlDeviceGetTotalEccErrors,
         (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)),
        (FI_PCIE_REPLAY, "nvmlDeviceGetPcieReplayCounter",
         pynvml.nvmlDeviceGetPcieReplayCounter, ()),
    )
    for fid, what, fn, extra in singles:
        value = call(what, fn, handle, *extra)
        if value is not None:
            out[fid] = value
    return out


def read(dev: NvmlDevice, xids: Mapping[int, int] | None = None) -> DeviceResult:
    """One scrape of one physical device and its MIG devices. `xids`: the listener's
    counts for this device (None when it does not listen to it). Raises NvmlGone."""
    call = _Calls(dev.identity.key)
    try:
        reading = _read_physical(call, dev, xids)
    except DeviceLost as exc:
        call.failures.append((f"{dev.identity.hw_id}:lost",
                              f"GPU {dev.identity.hw_id} is lost: {exc}"))
        return DeviceResult(down(dev, "failed"), tuple(call.failures))
    readings = [reading]
    for mig in dev.migs:
        mig_call = _Calls(mig.identity.key)
        try:
            used, total = _memory(mig_call, mig.handle)
            readings.append(GpuReading(mig.identity, up=True, memory_usage_bytes=used,
                                       memory_limit_bytes=total, state=reading.state))
        except DeviceLost:
            readings.append(GpuReading(mig.identity, up=False, state="failed"))
        call.failures.extend(mig_call.failures)
    return DeviceResult(tuple(readings), tuple(call.failures))


def down(dev: NvmlDevice, state: HealthState | None = None) -> tuple[GpuReading, ...]:
    """Readings for a device that did not answer (lost, hung): identity only."""
    return tuple(GpuReading(d.identity, up=False, state=state) for d in (dev, *dev.migs))


def _read_physical(
    call: _Calls, dev: NvmlDevice, xids: Mapping[int, int] | None
) -> GpuReading:
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
    used, total = _memory(call, h)
    power = call("nvmlDeviceGetPowerUsage", pynvml.nvmlDeviceGetPowerUsage, h)
    limit = call("nvmlDeviceGetEnforcedPowerLimit", pynvml.nvmlDeviceGetEnforcedPowerLimit, h)
    fields = _fields(call, h)
    temperatures: dict[str, float] = {}
    die = _temperature(call, h)
    if die is not None:
        temperatures["die"] = float(die)
    if FI_MEMORY_TEMP in fields:
        temperatures["memory"] = float(fields[FI_MEMORY_TEMP])
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
    reasons = _clock_reasons(call, h)
    throttle = ({name: bool(reasons & bit) for name, bit in CLOCK_EVENT_REASONS.items()}
                if reasons is not None else {})
    errors: dict[ErrorType, int] = {}
    for error_type, fid in (("corrected", FI_ECC_CORRECTED),
                            ("uncorrected", FI_ECC_UNCORRECTED),
                            ("pcie_replay", FI_PCIE_REPLAY)):
        if fid in fields:
            errors[error_type] = int(fields[fid])  # type: ignore[index]
    if xids is not None:
        errors["xid"] = sum(xids.values())
    io: dict[Any, int] = {}
    if FI_PCIE_RX_BYTES in fields:
        io["receive"] = int(fields[FI_PCIE_RX_BYTES])
    if FI_PCIE_TX_BYTES in fields:
        io["transmit"] = int(fields[FI_PCIE_TX_BYTES])
    energy = fields.get(FI_ENERGY)
    return GpuReading(
        identity=dev.identity,
        up=True,
        utilization_ratio=utilization,
        memory_usage_bytes=used,
        memory_limit_bytes=total,
        memory_controller_utilization_ratio=controller,
        power_draw_watts=None if power is None else power / 1000.0,
        power_limit_watts=None if limit is None else limit / 1000.0,
        energy_consumed_joules=None if energy is None else energy / 1000.0,
        temperature_celsius=temperatures,
        fan_speed_ratio=fans,
        clock_hertz=clocks,
        io_bytes=io,
        errors=errors,
        xid_errors=dict(xids or {}),
        throttle_active=throttle,
        state=health(errors, throttle, fields, xids or {}),
    )


def health(
    errors: Mapping[ErrorType, int], throttle: Mapping[str, bool], fields: Mapping[int, float],
    xids: Mapping[int, int],
) -> HealthState:
    if (errors.get("uncorrected", 0) > 0 or fields.get(FI_REMAPPED_FAILURE, 0)
            or any(xids.get(x, 0) for x in FAILED_XIDS)):
        return "failed"
    if (any(throttle.get(r) for r in DEGRADED_REASONS)
            or fields.get(FI_RETIRED_PENDING, 0) or fields.get(FI_REMAPPED_PENDING, 0)):
        return "degraded"
    return "ok"


# ---- XID events -----------------------------------------------------------------------
def _address(handle: Any) -> int:
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)


class XidListener:
    """Counts XID events per device and code, on one thread blocked in
    nvmlEventSetWait_v2. Counts start at zero when the exporter (re)initialises NVML."""

    WAIT_MS = 500

    def __init__(self, devices: Sequence[NvmlDevice]) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, dict[int, int]] = {}
        self._by_handle: dict[int, str] = {}
        self._stop = threading.Event()
        self._set: Any = None
        self._thread: threading.Thread | None = None
        self._devices = list(devices)

    def start(self) -> None:
        try:
            self._set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:
            log.info("NVIDIA XID events unavailable: %s", exc)
            return
        for dev in self._devices:
            try:
                pynvml.nvmlDeviceRegisterEvents(
                    dev.handle, pynvml.nvmlEventTypeXidCriticalError, self._set)
            except pynvml.NVMLError as exc:
                log.info("XID events unavailable for %s: %s", dev.identity.hw_id, exc)
                continue
            self._counts[dev.identity.key] = {}
            self._by_handle[_address(dev.handle)] = dev.identity.key
        self._thread = threading.Thread(target=self._run, name="nvml-xid", daemon=True)
        self._thread.start()

    def counts(self, hw_id: str) -> dict[int, int] | None:
        with self._lock:
            counts = self._counts.get(hw_id)
            return None if counts is None else dict(counts)

    def _run(self) -> None:
        try:
            self._listen()
        finally:
            # Only this thread frees the set: nobody else can still be waiting on it.
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlEventSetFree(self._set)

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                data = pynvml.nvmlEventSetWait_v2(self._set, self.WAIT_MS)
            except pynvml.NVMLError as exc:
                if exc.value == pynvml.NVML_ERROR_TIMEOUT:
                    continue
                if exc.value in _GONE:
                    return  # NVML is re-initialised with a new listener
                log.warning("waiting for NVIDIA XID events failed: %s", exc)
                self._stop.wait(1.0)
                continue
            if not data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                continue
            hw_id = self._by_handle.get(_address(data.device))
            if hw_id is None:
                continue
            xid = int(data.eventData)
            log.warning("XID %d on %s", xid, hw_id)
            with self._lock:
                codes = self._counts[hw_id]
                codes[xid] = codes.get(xid, 0) + 1

    def stop(self, wait: float = 0.0) -> None:
        """Ends the listener within one wait period; it frees its event set itself, so
        a scrape that stops it need not wait (`wait` > 0 joins, for a tidy close)."""
        self._stop.set()
        if self._thread is None:
            if self._set is not None:
                with contextlib.suppress(pynvml.NVMLError):
                    pynvml.nvmlEventSetFree(self._set)
                self._set = None
        elif wait > 0:
            self._thread.join(wait)
