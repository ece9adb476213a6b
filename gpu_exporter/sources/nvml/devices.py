"""A GPU's identity, its MIG devices and what it can report, read once per NVML session
(on the GPU's own discovery worker, under a deadline)."""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pynvml

from gpu_exporter.model.features import Availability
from gpu_exporter.model.records import GpuIdentity, PcieLink
from gpu_exporter.model.settings import Settings
from gpu_exporter.readers.sysfs.pci import normalize_pci_address
from gpu_exporter.sources.nvml import fields, nvlink, pcie
from gpu_exporter.sources.nvml.calls import (
    ABSENT,
    FIX_CHECK,
    FIX_UPDATE,
    GONE,
    LOST,
    Calls,
    DeviceLost,
    NvmlGone,
    Versions,
    text,
)
from gpu_exporter.sources.nvml.events import XidListener
from gpu_exporter.sources.nvml.fields import FieldPlan
from gpu_exporter.sources.nvml.gpm import GPM, GpmDevice

T = TypeVar("T")
process_utilization = Versions.of("nvmlDeviceGetProcessUtilization")
_NO_INSTANCE = 0xFFFFFFFF  # NVML: "not in a MIG instance"


@dataclass(frozen=True)
class NvmlDevice:
    """A GPU (or MIG device) found at discovery, with its static identity."""

    identity: GpuIdentity
    handle: Any  # pynvml c_nvmlDevice_t
    index: int  # NVML index; a MIG device: its slot
    num_fans: int = 0
    migs: tuple[NvmlDevice, ...] = ()
    # MIG: (GPU instance id, compute instance id), as NVML names a process's instance
    instance: tuple[int | None, int | None] | None = None
    # What the GPU can report (its `nvidia.ecc`, `nvidia.xid` and
    # `processes.nvml_utilization` states); MIG: None.
    ecc: Availability | None = None
    xid: Availability | None = None
    process_utilization: Availability | None = None
    # Its `nvidia.vgpu_license` state: enabled on a vGPU guest only (the licence is read
    # each scrape there, and nowhere else).
    vgpu_license: Availability | None = None
    fields: FieldPlan = field(default_factory=FieldPlan, compare=False, repr=False)
    # Its NVLinks (`nvidia.nvlink` state; rows in `fields`), the most its PCIe link
    # allows, and its PCI functions in sysfs (AER counters where NVML has none).
    nvlinks: int = 0
    nvlink_per_link: bool = False
    nvlink: Availability | None = None
    pcie_max: PcieLink | None = None
    pci_functions: tuple[Path, ...] = ()
    # SM/tensor/DRAM activity of the GPU and its MIG GPU instances; None with GPM off.
    gpm: GpmDevice | None = field(default=None, compare=False, repr=False)
    # The UUID as NVML gives it: the hw_id, unless another GPU gives the same one
    # (`stack.distinct`).
    uuid: str = ""
    # The superchip module it sits on (nvmlDeviceGetPlatformInfo's moduleId: GH200,
    # GB200); None elsewhere.
    module_id: int | None = None


class IdentityUnreadable(Exception):
    """A GPU NVML counts whose identity cannot be read: reported down by what is known
    of it (`pci_address`) until it can be read."""

    def __init__(self, index: int, message: str, *, lost: bool) -> None:
        super().__init__(f"NVIDIA device {index}: its identity cannot be read: {message}")
        self.lost = lost


def discover(index: int, version: str | None, events: XidListener | None,
             seen: MutableMapping[int, str], settings: Settings | None = None) -> NvmlDevice:
    """Identity of GPU `index` with its MIG devices and capabilities, and (GPM on) its
    first GPM samples. Its PCI address goes into `seen` as soon as it is read, for the
    GPU's `hw_gpu_up 0` should a later call hang or fail. Raises IdentityUnreadable,
    NvmlGone."""
    try:
        return _discover(index, version, events, seen, settings or Settings())
    except pynvml.NVMLError as exc:
        if exc.value in GONE:
            raise NvmlGone(str(exc)) from None
        raise IdentityUnreadable(index, str(exc), lost=exc.value in LOST) from None


def _optional(fn: Callable[..., T], *args: Any) -> T | None:
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        if exc.value in ABSENT:
            return None
        raise


def _discover(index: int, version: str | None, events: XidListener | None,
              seen: MutableMapping[int, str], settings: Settings) -> NvmlDevice:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    pci = pynvml.nvmlDeviceGetPciInfo(handle)
    raw = pci.busId
    bus_id = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    address = normalize_pci_address(bus_id)
    if address is not None:
        seen[index] = address
    uuid = text(pynvml.nvmlDeviceGetUUID, handle)
    name = text(pynvml.nvmlDeviceGetName, handle)
    serial = _optional(text, pynvml.nvmlDeviceGetSerial, handle)
    vbios = _optional(text, pynvml.nvmlDeviceGetVbiosVersion, handle)
    part = _optional(text, pynvml.nvmlDeviceGetBoardPartNumber, handle)
    num_fans = _optional(pynvml.nvmlDeviceGetNumFans, handle) or 0
    identity = GpuIdentity(
        hw_id=uuid, name=name, vendor="nvidia", pci_address=address,
        order_key=(index,), model=str(part) if part else None, driver_version=version,
        firmware_version=str(vbios) if vbios else None,
        serial_number=str(serial) if serial else None, nvml_bus_id=bus_id or None,
    )
    plan = FieldPlan()
    migs = _migs(handle, identity)
    activity = None
    try:
        # One read of the fields settles which come from the batch, which from their
        # own function and which from nowhere (the ECC state depends on it).
        found = fields.read(Calls(identity.key), handle, plan)
        if settings.get(GPM):  # the first sample now, so that the first scrape has values
            activity = GpmDevice(handle, identity.key, [
                (m.identity.key, m.instance[0] if m.instance else None) for m in migs])
            activity.start(time.monotonic)
    except DeviceLost as exc:
        raise IdentityUnreadable(index, str(exc), lost=True) from None
    links = int(found.get(nvlink.LINK_COUNT, 0))
    per_link = settings.get(nvlink.PER_LINK)
    plan.add(nvlink.rows(links, per_link))
    return NvmlDevice(
        identity, handle, index, int(num_fans), migs,
        ecc=_ecc(handle),
        vgpu_license=_vgpu_guest(handle),
        xid=events.register(handle, identity.key) if events is not None else None,
        process_utilization=_process_utilization(handle),
        fields=plan,
        nvlinks=links, nvlink_per_link=per_link,
        nvlink=nvlink.availability(found.get(nvlink.LINK_COUNT),
                                   plan.absent.get(nvlink.LINK_COUNT), per_link),
        pcie_max=pcie.maxima(handle),
        pci_functions=pcie.card_functions(settings.sysfs, address),
        gpm=activity, uuid=uuid, module_id=_module_id(handle),
    )


def _module_id(handle: Any) -> int | None:
    """The module id of nvmlDeviceGetPlatformInfo (v2, else v1: same place); None where
    NVML has no platform info (not a superchip, an older driver) and where the bindings
    predate it (12.570.86, the oldest nvidia-ml-py of the pinned range, has no structs)."""
    structs = [getattr(pynvml, name, None)
               for name in ("c_nvmlPlatformInfo_v2_t", "c_nvmlPlatformInfo_v1_t")]
    if not hasattr(pynvml, "nvmlDeviceGetPlatformInfo"):
        return None
    for struct in structs:
        if struct is None:
            continue
        info = struct()
        try:
            pynvml.nvmlDeviceGetPlatformInfo(handle, ctypes.byref(info))
        except pynvml.NVMLError as exc:
            if exc.value == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
                continue
            if exc.value in ABSENT:
                return None
            raise
        # ctypes' own access: pynvml's would decode the one-byte c_char as text
        raw = ctypes.Structure.__getattribute__(info, "moduleId")
        return raw[0] if raw else 0
    return None


def _ecc(handle: Any) -> Availability:
    """ECC as the board has it; whether its counters are read is known at the scrape."""
    try:
        current, pending = pynvml.nvmlDeviceGetEccMode(handle)
    except pynvml.NVMLError as exc:
        if exc.value == pynvml.NVML_ERROR_NOT_SUPPORTED:
            return Availability.disabled("this GPU has no ECC memory (NVML: Not Supported)")
        if exc.value in LOST | GONE:
            raise
        return Availability.unavailable(
            f"nvmlDeviceGetEccMode: {exc}",
            FIX_UPDATE if exc.value == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND else FIX_CHECK)
    if current:
        return Availability.enabled()
    return Availability.disabled(
        "ECC is switched off on this GPU" + (" (on after its next reset)" if pending else ""),
        "nvidia-smi -i <GPU> -e 1, then reset the GPU or reboot")


_VIRTUALIZATION_MODES = {
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE: "bare metal",
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH: "passed through to this VM",
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU: "a vGPU host",
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VSGA: "a vSGA host",
}


def _vgpu_guest(handle: Any) -> Availability:
    """Enabled when the GPU is a vGPU guest's: the only place a vGPU licence applies."""
    try:
        mode = pynvml.nvmlDeviceGetVirtualizationMode(handle)
    except pynvml.NVMLError as exc:
        if exc.value in LOST | GONE:
            raise
        return Availability.disabled(
            f"not a vGPU guest (NVML gives no virtualization mode: {exc})")
    if mode == pynvml.NVML_GPU_VIRTUALIZATION_MODE_VGPU:
        return Availability.enabled("a vGPU guest")
    where = _VIRTUALIZATION_MODES.get(mode, f"virtualization mode {mode}")
    return Availability.disabled(
        f"not a vGPU guest ({where}): a vGPU licence applies to vGPU guests only")


def _process_utilization(handle: Any) -> Availability:
    try:
        process_utilization(handle, 0)
    except pynvml.NVMLError as exc:
        if exc.value in LOST | GONE:
            raise
        return utilization_state(exc.value)
    return Availability.enabled()


def utilization_state(code: int) -> Availability:
    """Whether a GPU gives process utilization samples, by NVML's answer."""
    if code == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
        return Availability.unavailable(
            "this NVML library has no nvmlDeviceGetProcessUtilization: processes have "
            "memory but no utilization", FIX_UPDATE)
    if code == pynvml.NVML_ERROR_NOT_SUPPORTED:
        return Availability.disabled(
            "this GPU does not report utilization per process (NVML: Not Supported; "
            "e.g. in MIG mode)")
    return Availability.enabled()  # NOT_FOUND (no sample yet) or a passing failure


def _migs(handle: Any, parent: GpuIdentity) -> tuple[NvmlDevice, ...]:
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
        name = text(pynvml.nvmlDeviceGetName, mig)
        # Drivers name MIG devices "<parent name> MIG <profile>".
        _, sep, profile = name.rpartition(" MIG ")
        gi = instance_id(_optional(pynvml.nvmlDeviceGetGpuInstanceId, mig))
        ci = instance_id(_optional(pynvml.nvmlDeviceGetComputeInstanceId, mig))
        identity = GpuIdentity(
            hw_id=text(pynvml.nvmlDeviceGetUUID, mig), name=parent.name, vendor="nvidia",
            pci_address=parent.pci_address,
            order_key=(*parent.order_key, slot, gi if gi is not None else -1,
                       ci if ci is not None else -1),
            model=parent.model, driver_version=parent.driver_version,
            firmware_version=parent.firmware_version, parent_hw_id=parent.hw_id,
            mig_profile=profile if sep else None, nvml_bus_id=parent.nvml_bus_id,
            gpu_instance_id=gi,
        )
        migs.append(NvmlDevice(identity, mig, slot, instance=(gi, ci)))
    return tuple(migs)


def instance_id(value: Any) -> int | None:
    """A GPU or compute instance id; None for NVML's "not in a MIG instance"."""
    if value is None or int(value) == _NO_INSTANCE:
        return None
    return int(value)
