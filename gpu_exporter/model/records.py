"""Typed, vendor-neutral records that readers return, in base units.

Readers (NVML, sysfs, eBPF, /proc) fill these; only the collectors turn them into
Prometheus families. A field left at None / absent from a mapping is "not reported":
it produces no sample.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from gpu_exporter.model.vendors import VENDOR_ORDER as VENDOR_ORDER
from gpu_exporter.model.vendors import Vendor as Vendor

GpuTask = Literal["general", "encoder", "decoder"]
HealthState = Literal["ok", "degraded", "failed"]
PcieErrorType = Literal["pcie_correctable", "pcie_nonfatal", "pcie_fatal"]  # AER
NvlinkErrorType = Literal[
    "nvlink_crc_flit", "nvlink_crc_data", "nvlink_replay", "nvlink_recovery", "nvlink_ecc_data"]
ErrorType = Literal[
    "corrected", "uncorrected", "pcie_replay", "xid",
    "pcie_correctable", "pcie_nonfatal", "pcie_fatal",
    "nvlink_crc_flit", "nvlink_crc_data", "nvlink_replay", "nvlink_recovery", "nvlink_ecc_data",
]
Direction = Literal["receive", "transmit"]
# NVML_NVLINK_STATE_* 0..3, in that order
NvlinkState = Literal["inactive", "active", "sleep", "active_traffic_disabled"]
NVLINK_STATES: tuple[NvlinkState, ...] = get_args(NvlinkState)
# GPM pipes (NVIDIA Hopper and newer): tensor cores by instruction kind, and the pipes
# outside them.
GpmPipe = Literal["tensor_hmma", "tensor_imma", "tensor_dfma", "tensor_dmma", "fp64", "fp32",
                  "fp16", "integer"]

# NVML's GPU recovery action (nvml.h nvmlDeviceGpuRecoveryAction_t 0..7, in that order;
# hard-coded: the bindings name a different range); any other value is "unknown".
RecoveryAction = Literal[
    "none", "gpu_reset", "node_reboot", "drain_p2p", "drain_and_reset", "recover_imex_domain",
    "bus_reset", "system_reboot", "unknown"]
RECOVERY_ACTIONS: tuple[RecoveryAction, ...] = get_args(RecoveryAction)
# A vGPU guest's licence: the vGPU feature's state (nvml.h featureState: non-zero when
# licensed).
VgpuLicenseState = Literal["licensed", "unlicensed"]
VGPU_LICENSE_STATES: tuple[VgpuLicenseState, ...] = get_args(VgpuLicenseState)
EccSeverity = Literal["corrected", "uncorrected"]
NicLinkState = Literal["up", "down"]
NicScope = Literal["external", "internal"]  # scale-out, or card to card in the box

# gpu_index order across vendors, and the vendors themselves: model/vendors.py.


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
    # NVIDIA: the PCI bus id as NVML writes it (00000000:3B:00.0), which dcgm-exporter's
    # pci_bus_id label carries and PromQL cannot make from pci_address (no upper-casing)
    nvml_bus_id: str | None = None
    gpu_instance_id: int | None = None  # MIG: NVML's GPU instance id (DCGM's GPU_I_ID)

    @property
    def key(self) -> str:
        """What samples name their device by: hw_id, else the PCI address, else (an
        NVIDIA GPU NVML counts but that was lost or hung before it gave either) its NVML
        index."""
        key = self.hw_id or self.pci_address
        if key is None:
            if self.vendor == "nvidia" and len(self.order_key) == 1:
                return f"nvml-index:{self.order_key[0]}"
            raise ValueError(f"a device needs a hw_id or a PCI address: {self}")
        return key


@dataclass(frozen=True)
class PcieLink:
    """The PCIe link between a card and its slot; None where unknown."""

    current_width_lanes: int | None = None
    max_width_lanes: int | None = None  # the lower of the card's and the slot's
    current_transfers_per_second: float | None = None  # per lane: 16e9 is PCIe 4.0
    max_transfers_per_second: float | None = None


@dataclass(frozen=True)
class NvlinkReading:
    """A GPU's NVLinks at one scrape. Link None: all links of the GPU together; per-link
    values replace the all-links ones, never both (a sum over a GPU is its total)."""

    states: Mapping[int, NvlinkState] = field(default_factory=dict)  # by link
    io_bytes: Mapping[tuple[int | None, Direction], int] = field(default_factory=dict)
    errors: Mapping[tuple[int | None, NvlinkErrorType], int] = field(default_factory=dict)
    per_link: bool = False  # states are reported link by link, not counted by state

    def links_by_state(self) -> dict[NvlinkState, int]:
        """How many links are in each state (every state, 0 included)."""
        counts = dict.fromkeys(NVLINK_STATES, 0)
        for state in self.states.values():
            counts[state] += 1
        return counts


@dataclass(frozen=True)
class GpmReading:
    """GPM activity averaged over `window_seconds` (the time between two samples), ratios
    0..1; None or a missing pipe: not reported (not supported, an error, or NaN)."""

    window_seconds: float
    engine_active_ratio: float | None = None
    sm_active_ratio: float | None = None
    sm_occupancy_ratio: float | None = None
    tensor_active_ratio: float | None = None
    dram_active_ratio: float | None = None
    pipe_active_ratio: Mapping[GpmPipe, float] = field(default_factory=dict)


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
    last_xid: int | None = None  # the code of the last XID (None: none since the start)
    throttle_active: Mapping[str, bool] = field(default_factory=dict)  # reason -> active
    state: HealthState | None = None
    pcie_link: PcieLink | None = None
    nvlink: NvlinkReading | None = None  # None: a GPU without NVLink (or not read)
    # The card's own NICs (Gaudi): how many ports are in each link state, by scope
    nic_links: Mapping[tuple[NicScope, NicLinkState], int] = field(default_factory=dict)
    # GPM: this device's (a GPU, or a MIG device alone in its GPU instance), and, on a GPU,
    # those of its MIG GPU instances shared by several compute instances, by instance id.
    gpm: GpmReading | None = None
    gpm_instances: Mapping[int, GpmReading] = field(default_factory=dict)
    # A MIG device sharing its GPU instance with other compute instances: that instance's
    # GPM (emitted once, on the parent's gpm_instances; here for the energy split).
    gpu_instance_gpm: GpmReading | None = None
    # What the GPU needs: the driver's recovery action, memory repair state, and the
    # driver's framebuffer reservation; the vGPU licence on a vGPU guest.
    recovery_action: RecoveryAction | None = None
    remapped_rows: Mapping[EccSeverity, int] = field(default_factory=dict)
    row_remap_pending: bool | None = None
    row_remap_failure: bool | None = None
    retired_pages: Mapping[EccSeverity, int] = field(default_factory=dict)
    retired_pages_pending: bool | None = None
    memory_reserved_bytes: int | None = None
    vgpu_license_state: VgpuLicenseState | None = None
