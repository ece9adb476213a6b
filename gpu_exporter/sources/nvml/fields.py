"""The field-values batch as a table: one `nvmlDeviceGetFieldValues` call per GPU and
scrape instead of one call per counter, with a fallback per field.

A row names the field (pynvml's `NVML_FI_DEV_*` id, and a scope for per-link fields),
how its value converts to base units, and the dedicated function that reads it when the
batch cannot. Drivers answer NOT_SUPPORTED for some fields in the batch while the
dedicated function works (old drivers, some vGPU and field combinations): such a field
is read once through its own function, and what works is remembered per device for the
NVML session (`FieldPlan`), so a field that exists nowhere costs one failed call, not
one per scrape. To add a counter (NVLink, PCIe), add a row and read it by name.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import pynvml

from gpu_exporter.sources.nvml.calls import ABSENT, Calls, Versions, by_name


@dataclass(frozen=True)
class Fallback:
    """The dedicated function: called as `function(handle, *args)`."""

    function: str
    args: tuple[Any, ...] = ()
    item: int | None = None  # a function answering a tuple: the element that is the field


@dataclass(frozen=True)
class Field:
    name: str  # how readers ask for it
    field_id: int  # pynvml.NVML_FI_DEV_*
    per_unit: float = 1.0  # NVML's units per base unit (mJ per J: 1000)
    fallback: Fallback | None = None
    # per-link fields: the link; power fields: the power scope; None: the device
    scope_id: int | None = None

    @property
    def request(self) -> tuple[int, int]:
        # Always a pair: pynvml's nvmlDeviceGetFieldValues unpacks each request as
        # (fieldId, scopeId) and falls back on a TypeError for a bare id, an exception
        # per field per scrape. Scope 0 is what the zeroed struct holds for a device field.
        return self.field_id, self.scope_id or 0


_ECC_VOLATILE = pynvml.NVML_VOLATILE_ECC
RECOVERY_ACTION = "recovery_action"
MODULE_POWER = "module_power_watts"
POWER_DRAW = "power_draw_watts"
FIELDS: tuple[Field, ...] = (
    Field("ecc_corrected", pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, fallback=Fallback(
        "nvmlDeviceGetTotalEccErrors",
        (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, _ECC_VOLATILE))),
    Field("ecc_uncorrected", pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, fallback=Fallback(
        "nvmlDeviceGetTotalEccErrors",
        (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, _ECC_VOLATILE))),
    Field("retired_pages_pending", pynvml.NVML_FI_DEV_RETIRED_PENDING),
    Field("memory_temperature_celsius", pynvml.NVML_FI_DEV_MEMORY_TEMP),
    Field("energy_joules", pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, per_unit=1000.0,
          fallback=Fallback("nvmlDeviceGetTotalEnergyConsumption")),
    # GPU power, mW. nvmlDeviceGetPowerUsage answers the 1 s average on Ampere (except
    # GA100) and newer, the instant value on GA100 and older; NVML_FI_DEV_POWER_AVERAGE is
    # that same 1 s average and exists on exactly those newer GPUs. So: the field in the
    # batch where the driver has it, the function (instant) where it answers
    # NOT_SUPPORTED: the reading nvmlDeviceGetPowerUsage gives, one call fewer a scrape.
    Field(POWER_DRAW, pynvml.NVML_FI_DEV_POWER_AVERAGE, per_unit=1000.0,
          fallback=Fallback("nvmlDeviceGetPowerUsage"), scope_id=pynvml.NVML_POWER_SCOPE_GPU),
    Field("pcie_replays", pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER,
          fallback=Fallback("nvmlDeviceGetPcieReplayCounter")),
    # Memory repair (Ampere and newer: row remapping; older GPUs: page retirement) and the
    # driver's recovery verdict (drivers 570+): what the GPU needs, read with the rest.
    Field("remapped_rows_corrected", pynvml.NVML_FI_DEV_REMAPPED_COR,
          fallback=Fallback("nvmlDeviceGetRemappedRows", item=0)),
    Field("remapped_rows_uncorrected", pynvml.NVML_FI_DEV_REMAPPED_UNC,
          fallback=Fallback("nvmlDeviceGetRemappedRows", item=1)),
    Field("remapped_rows_pending", pynvml.NVML_FI_DEV_REMAPPED_PENDING,
          fallback=Fallback("nvmlDeviceGetRemappedRows", item=2)),
    Field("remapped_rows_failure", pynvml.NVML_FI_DEV_REMAPPED_FAILURE,
          fallback=Fallback("nvmlDeviceGetRemappedRows", item=3)),
    Field("retired_pages_corrected", pynvml.NVML_FI_DEV_RETIRED_SBE),
    Field("retired_pages_uncorrected", pynvml.NVML_FI_DEV_RETIRED_DBE),
    Field(RECOVERY_ACTION, pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION),
    Field("pcie_transmit_bytes", pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES),
    Field("pcie_receive_bytes", pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES),
    # AER-like counts of the GPU's PCIe link (drivers 550+, newer GPUs); elsewhere sysfs
    Field("pcie_correctable", pynvml.NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS),
    Field("pcie_nonfatal", pynvml.NVML_FI_DEV_PCIE_COUNT_NON_FATAL_ERROR),
    Field("pcie_fatal", pynvml.NVML_FI_DEV_PCIE_COUNT_FATAL_ERROR),
    # The superchip module the GPU sits on (GH200/GB200: Grace, its GPUs and their
    # memory), mW; NOT_SUPPORTED elsewhere. Every GPU of a module gives the same value:
    # the collector reports it once per module (`collectors.nvidia`).
    Field(MODULE_POWER, pynvml.NVML_FI_DEV_POWER_INSTANT, per_unit=1000.0,
          scope_id=pynvml.NVML_POWER_SCOPE_MODULE),
    # how many NVLinks the GPU has: discovery adds their rows (`nvml.nvlink`)
    Field("nvlink_links", pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT),
)

# One entry of the batch that a driver without the field (or not knowing its id) answers.
_FIELD_ABSENT = ABSENT | {pynvml.NVML_ERROR_INVALID_ARGUMENT}
_batch = Versions.of("nvmlDeviceGetFieldValues")
# ctypes' own attribute access: pynvml's structures override it to decode bytes, which
# these numeric members never are, at several times the cost, ten fields a GPU a scrape.
_plain_attribute = ctypes.Structure.__getattribute__
_VALUE_MEMBER = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


@dataclass
class FieldPlan:
    """How each field is read on one device, learnt as it answers: in the batch, through
    its own function (`singles`), or not at all (`absent`: name -> NVML's answer). Only
    the lane reading the device touches it."""

    batch: list[Field] = field(default_factory=lambda: list(FIELDS))
    singles: list[Field] = field(default_factory=list)
    absent: dict[str, int] = field(default_factory=dict)
    _requests: list[tuple[int, int]] | None = None

    def add(self, rows: tuple[Field, ...]) -> None:
        """Rows of this device only (its NVLinks), asked for from the next read on."""
        self.batch.extend(rows)
        self._requests = None

    def requests(self) -> list[tuple[int, int]]:
        if self._requests is None:
            self._requests = [f.request for f in self.batch]
        return self._requests

    def leave_batch(self, f: Field, call: Calls, handle: Any, code: int,
                    out: dict[str, float]) -> None:
        """The batch cannot give `f`: read it through its own function from now on if
        that answers, else never again."""
        self.batch.remove(f)
        self._requests = None
        if f.fallback is not None and self._single(f, call, handle, out):
            self.singles.append(f)
        elif f.fallback is None:
            self.absent[f.name] = code

    def _single(self, f: Field, call: Calls, handle: Any, out: dict[str, float]) -> bool:
        """Reads `f` through its own function; False (and `f` absent from then on) when
        the function does not give it."""
        assert f.fallback is not None
        fn = by_name(f.fallback.function)
        if fn is None:
            self.absent[f.name] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
            return False
        try:
            value = fn(handle, *f.fallback.args)
            if f.fallback.item is not None:
                value = value[f.fallback.item]
            out[f.name] = _scaled(value, f.per_unit)
        except pynvml.NVMLError as exc:
            if exc.value in ABSENT:
                self.absent[f.name] = exc.value
                return False
            call.check(f.fallback.function, exc.value, exc)
        return True


def read(call: Calls, handle: Any, plan: FieldPlan) -> dict[str, float]:
    """The fields of one device in base units, by name; a field not given is absent."""
    out: dict[str, float] = {}
    if plan.batch:
        _read_batch(call, handle, plan, out)
    for f in list(plan.singles):
        if not plan._single(f, call, handle, out):
            plan.singles.remove(f)
    return out


def _read_batch(call: Calls, handle: Any, plan: FieldPlan, out: dict[str, float]) -> None:
    try:
        values = _batch(handle, plan.requests())
    except pynvml.NVMLError as exc:
        if _batch.missing:  # a driver without the batch: every field on its own
            for f in list(plan.batch):
                plan.leave_batch(f, call, handle, exc.value, out)
        else:
            call.check(_batch.name, exc.value, exc)
        return
    get = _plain_attribute
    for f, fv in zip(list(plan.batch), values, strict=True):
        returned = get(fv, "nvmlReturn")
        if returned == pynvml.NVML_SUCCESS:
            member = _VALUE_MEMBER.get(get(fv, "valueType"))
            if member is not None:
                out[f.name] = _scaled(getattr(get(fv, "value"), member), f.per_unit)
        elif returned in _FIELD_ABSENT:
            plan.leave_batch(f, call, handle, returned, out)
        else:
            call.check(f"field {f.field_id}", returned)


def _scaled(value: float, per_unit: float) -> float:
    # Counters stay integers (a float would round those above 2**53).
    return value if per_unit == 1.0 else value / per_unit
