"""Typed, vendor-neutral records that readers return, in base units.

Readers (NVML, sysfs, eBPF, /proc) fill these; only the collectors turn them into
Prometheus families. A field left at None / absent from a mapping is "not reported":
it produces no sample.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Vendor = Literal["nvidia", "amd", "intel"]
GpuTask = Literal["general", "encoder", "decoder"]
HealthState = Literal["ok", "degraded", "failed"]
ErrorType = Literal["corrected", "uncorrected", "pcie_replay", "xid"]
Direction = Literal["receive", "transmit"]

# gpu_index order across vendors (spec: NVIDIA, then AMD, then Intel).
VENDOR_ORDER: dict[str, int] = {"nvidia": 0, "amd": 1, "intel": 2}


@dataclass(frozen=True)
class GpuIdentity:
    # NVIDIA UUID (GPU-…/MIG-…); AMD unique_id or PCI address; Intel PCI address. None for
    # a GPU the host has but whose identity no source gives (lost before it was read).
    hw_id: str | None
    name: str  # marketing name; "" when unknown
    vendor: Vendor
    pci_address: str | None  # 0000:3b:00.0
    order_key: tuple[int | str, ...]  # sorts devices of one vendor (NVML index, PCI address)
    model: str | None = None
    driver_version: str | None = None
    firmware_version: str | None = None
    serial_number: str | None = None
    parent_hw_id: str | None = None  # MIG: the parent GPU's hw_id
    mig_profile: str | None = None  # MIG: e.g. "1g.10gb"

    @property
    def key(self) -> str:
        """What samples name their device by: hw_id, else the PCI address."""
        key = self.hw_id or self.pci_address
        if key is None:
            raise ValueError(f"a device needs a hw_id or a PCI address: {self}")
        return key


@dataclass(frozen=True)
class GpuReading:
    """One device at one scrape. `up=False` readings carry identity only."""

    identity: GpuIdentity
    up: bool
    utilization_ratio: Mapping[GpuTask, float] = field(default_factory=dict)
    memory_usage_bytes: int | None = None
    memory_limit_bytes: int | None = None
    memory_controller_utilization_ratio: float | None = None
    power_draw_watts: float | None = None
    power_limit_watts: float | None = None
    energy_consumed_joules: float | None = None
    temperature_celsius: Mapping[str, float] = field(default_factory=dict)  # by sensor
    fan_speed_ratio: Mapping[str, float] = field(default_factory=dict)  # by fan
    fan_speed_rpm: Mapping[str, float] = field(default_factory=dict)  # by fan
    clock_hertz: Mapping[str, float] = field(default_factory=dict)  # by clock domain
    io_bytes: Mapping[Direction, int] = field(default_factory=dict)
    errors: Mapping[ErrorType, int] = field(default_factory=dict)  # cumulative counts
    xid_errors: Mapping[int, int] = field(default_factory=dict)  # xid code -> count
    throttle_active: Mapping[str, bool] = field(default_factory=dict)  # reason -> active
    state: HealthState | None = None
