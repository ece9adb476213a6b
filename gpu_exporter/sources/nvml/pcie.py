"""The PCIe link of an NVIDIA GPU and its error counts.

The link comes from NVML: its maximum (`nvmlDeviceGetMaxPcieLinkGeneration`/`…Width`,
already the lower of what the GPU and its slot allow) once at discovery, the current
generation and width each scrape. A generation becomes transfers per second per lane
(1: 2.5 GT/s … 6: 64 GT/s); what is no PCIe generation or width is absent.

Errors: NVML's PCIe error counts (field values, newer drivers and GPUs) where the GPU
has them, else the kernel's AER counters of the GPU's PCI functions in sysfs
(`readers.sysfs.pcie`), as for every other vendor.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pynvml

from gpu_exporter.model.records import ErrorType, PcieErrorType, PcieLink
from gpu_exporter.readers.file_values import Problems
from gpu_exporter.readers.sysfs import pcie as sysfs_pcie
from gpu_exporter.sources.nvml.calls import ABSENT, Calls

GEN_TRANSFERS: Mapping[int, float] = {1: 2.5e9, 2: 5e9, 3: 8e9, 4: 16e9, 5: 32e9, 6: 64e9}
# field names in `nvml.fields.FIELDS`, by error type
ERROR_FIELDS: tuple[PcieErrorType, ...] = ("pcie_correctable", "pcie_nonfatal", "pcie_fatal")


def _lanes(value: Any) -> int | None:
    return int(value) if value is not None and int(value) in sysfs_pcie.WIDTHS else None


def _transfers(generation: Any) -> float | None:
    return None if generation is None else GEN_TRANSFERS.get(int(generation))


def maxima(handle: Any) -> PcieLink:
    """The most the GPU and its slot allow (fixed: read once)."""
    def optional(fn: Any) -> Any:
        try:
            return fn(handle)
        except pynvml.NVMLError as exc:
            if exc.value in ABSENT:
                return None
            raise
    return PcieLink(max_width_lanes=_lanes(optional(pynvml.nvmlDeviceGetMaxPcieLinkWidth)),
                    max_transfers_per_second=_transfers(
                        optional(pynvml.nvmlDeviceGetMaxPcieLinkGeneration)))


def link(call: Calls, handle: Any, most: PcieLink) -> PcieLink:
    """The link now, with its maxima from discovery."""
    width = call("nvmlDeviceGetCurrPcieLinkWidth", pynvml.nvmlDeviceGetCurrPcieLinkWidth,
                 handle)
    generation = call("nvmlDeviceGetCurrPcieLinkGeneration",
                      pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle)
    return PcieLink(_lanes(width), most.max_width_lanes, _transfers(generation),
                    most.max_transfers_per_second)


def card_functions(sysfs: str, pci_address: str | None) -> tuple[Path, ...]:
    """The GPU's PCI functions whose AER counters count its errors (the GPU, and the
    ports of a switch of its own); () when sysfs does not show the GPU."""
    if pci_address is None:
        return ()
    device = Path(sysfs, "bus", "pci", "devices", pci_address)
    if not os.path.isdir(device):
        return ()
    return sysfs_pcie.card_path(device).functions


def errors(call: Calls, values: Mapping[str, float], functions: tuple[Path, ...]
           ) -> dict[ErrorType, int]:
    """PCIe error counts: NVML's where it gives them, else the kernel's AER counters."""
    out: dict[ErrorType, int] = {name: int(values[name]) for name in ERROR_FIELDS
                                 if name in values}
    if len(out) < len(ERROR_FIELDS) and functions:
        problems = Problems()
        for error_type, count in sysfs_pcie.aer_errors(functions, problems).items():
            out.setdefault(error_type, count)
        call.failures.extend(problems.items)
    return out
