"""Every GPU vendor, registered in one place: its slug (the `hw_vendor` label and the
internal vendor of `records.GpuIdentity`), where its devices sort in `gpu_index`, the PCI
vendor ids its devices carry, the kernel drivers they are bound to, and the collector that
reads them.

Adding a vendor is a row here (and its slug in `Vendor`, which mypy checks the row
against), a reader, a collector and its line in `collectors.REGISTRY`: CONTRIBUTING.md's
"a GPU vendor" lists the places and `tests/core/test_vendors.py` holds the list true.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

# The slugs, lowercase. Habana Labs' Gaudi is "habana", not "intel": Intel bought Habana,
# but a Gaudi is no Intel GPU (its own PCI vendor id 0x1da3, its own driver habanalabs,
# its own management library), and every `hw_vendor="intel"` filter of the shipped rules
# and dashboards means Intel's GPUs (i915/xe sysfs semantics).
Vendor = Literal["nvidia", "amd", "intel", "habana"]


@dataclass(frozen=True)
class VendorInfo:
    slug: Vendor
    name: str  # as people write it, for messages
    pci_vendor_ids: tuple[int, ...]
    drivers: tuple[str, ...]  # the kernel drivers its devices are bound to
    collector: str  # the name of the collector that reads its devices


# In gpu_index order: a host's devices are numbered vendor by vendor, in this order.
VENDORS: tuple[VendorInfo, ...] = (
    VendorInfo("nvidia", "NVIDIA", (0x10DE,), ("nvidia",), "nvidia"),
    VendorInfo("amd", "AMD", (0x1002,), ("amdgpu",), "amd"),
    VendorInfo("intel", "Intel", (0x8086,), ("i915", "xe"), "intel"),
    VendorInfo("habana", "Habana Labs (Intel Gaudi)", (0x1DA3,), ("habanalabs",), "gaudi"),
)

VENDOR_ORDER: dict[str, int] = {v.slug: i for i, v in enumerate(VENDORS)}
VENDOR_IDS: dict[int, Vendor] = {pci: v.slug for v in VENDORS for pci in v.pci_vendor_ids}
GPU_DRIVERS: dict[str, Vendor] = {d: v.slug for v in VENDORS for d in v.drivers}
VENDOR_SLUGS: tuple[Vendor, ...] = get_args(Vendor)
