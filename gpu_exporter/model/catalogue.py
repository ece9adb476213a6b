"""The one metric catalogue: every family the exporter can emit, with its full label
schema.

A family's own labels are a TypedDict declared next to it (a label that may be absent
is NotRequired); its scope (`labels.Scope`) adds the device or process labels, and every
series carries the resource labels. Collectors emit only through these entries
(`c.HW_GPU_UP.emit(sink, 1, {}, device=key)`), which mypy checks against the TypedDict;
`docs/metrics.md` is generated from them (`make docs`; a test fails when it is stale).

No `from __future__ import annotations` here: see `gpu_exporter.model.labels`.
"""

from typing import Any, Literal, NotRequired, TypedDict

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.model.labels import (
    DEVICE_LABEL_SET,
    PROCESS_LABEL_SET,
    LabelSet,
    NoLabels,
    PodLabels,
    ProcessLabels,
    Scope,
)
from gpu_exporter.model.metric_types import Counter, Family, Gauge, Histogram, Kind
from gpu_exporter.model.records import (
    Direction,
    ErrorType,
    GpmPipe,
    GpuTask,
    HealthState,
    NvlinkState,
    RecoveryAction,
    VgpuLicenseState,
)

__all__ = ["BY_NAME", "CATALOGUE", "Family", "Kind", "LabelSet", "Scope", "prom_label"]


def prom_label(otel_attribute: str) -> str:
    """OpenTelemetry attribute name to Prometheus label name (dots to underscores)."""
    return otel_attribute.replace(".", "_")


D, P, C, H, S = Scope.DEVICE, Scope.PROCESS, Scope.CUDA, Scope.HOST, Scope.SELF

# --- device families -------------------------------------------------------------------


class GpuInfoLabels(TypedDict, total=False):  # each when the device reports it
    hw_model: str
    hw_driver_version: str
    hw_firmware_version: str
    hw_serial_number: str
    # NVIDIA: the PCI bus id in NVML's own form (00000000:3B:00.0), dcgm-exporter's
    # pci_bus_id, which PromQL cannot make from gpu_pci_address (it cannot upper-case)
    gpu_pci_bus_id: str
    gpu_instance_id: str  # MIG devices: NVML's GPU instance id (dcgm-exporter's GPU_I_ID)


HW_GPU_INFO = Gauge(
    "hw_gpu_info", "GPU identity, always 1; join on hw_id.", D, GpuInfoLabels,
    sources="NVML name/serial/VBIOS, driver version, PCI info busId, MIG GPU instance id; "
    "amdgpu product_name, vbios_version, serial_number; Intel PCI ids",
    dcgm="the labels of every dcgm-exporter series: pci_bus_id (gpu_pci_bus_id), "
    "DCGM_FI_DRIVER_VERSION (hw_driver_version), GPU_I_ID (gpu_instance_id); "
    "alerts/dcgm/ recreates dcgm-exporter's metrics from these",
)
HW_GPU_UP = Gauge(
    "hw_gpu_up",
    "1 when the device answered this scrape, 0 when a known device is lost, hung or "
    "unreadable.", D, NoLabels,
)


class TaskLabels(TypedDict):
    hw_gpu_task: GpuTask


HW_GPU_UTILIZATION = Gauge(
    "hw_gpu_utilization_ratio", "Fraction of time the engine was busy (0..1).", D,
    TaskLabels, unit="ratio", fixed=True,
    sources="NVML utilization rates, encoder and decoder utilization; amdgpu "
    "gpu_busy_percent; Intel DRM fdinfo engine time",
)
HW_GPU_MEMORY_USAGE = Gauge(
    "hw_gpu_memory_usage_bytes", "Device memory in use.", D, NoLabels, unit="bytes",
    fixed=True,
    sources="NVML memory info v2 used (v1 on old drivers); amdgpu mem_info_vram_used",
)
HW_GPU_MEMORY_LIMIT = Gauge(
    "hw_gpu_memory_limit_bytes", "Device memory size.", D, NoLabels, unit="bytes",
    fixed=True,
    sources="NVML memory total; amdgpu mem_info_vram_total; xe physical_vram_size_bytes",
)
HW_GPU_MEMORY_UTILIZATION = Gauge(
    "hw_gpu_memory_utilization_ratio", "Device memory in use over its size (0..1).", D,
    NoLabels, unit="ratio", sources="usage / limit, when both are known",
)
HW_GPU_MEMORY_CONTROLLER_UTILIZATION = Gauge(
    "hw_gpu_memory_controller_utilization_ratio",
    "Fraction of time the memory controller was busy (0..1).", D, NoLabels, unit="ratio",
    sources="NVML utilization rates (memory); amdgpu mem_busy_percent",
)
HW_GPU_POWER_DRAW = Gauge(
    "hw_gpu_power_draw_watts", "Power drawn by the device.", D, NoLabels, unit="watts",
    fixed=True,
    sources="NVML power usage (mW); amdgpu hwmon power1_average/power1_input (µW); Intel "
    "derived from the energy counter between scrapes",
)
HW_GPU_POWER_LIMIT = Gauge(
    "hw_gpu_power_limit_watts", "Enforced power limit.", D, NoLabels, unit="watts",
    fixed=True, sources="NVML enforced power limit; amdgpu power1_cap; Intel power1_max",
)
HW_GPU_ENERGY = Counter(
    "hw_gpu_energy_consumed_joules_total", "Energy consumed by the device.", D, NoLabels,
    unit="joules", fixed=True,
    sources="NVML total energy consumption (mJ); amdgpu gpu_metrics energy accumulator; "
    "Intel hwmon energy1_input (µJ)",
)


class SensorLabels(TypedDict):
    sensor: str


HW_GPU_TEMPERATURE = Gauge(
    "hw_gpu_temperature_celsius", "Temperature by sensor.", D, SensorLabels,
    unit="celsius", fixed=True,
    sources="NVML GPU and memory temperature; amdgpu/Intel hwmon temp*_input by label",
)


class FanLabels(TypedDict):
    fan: str


HW_GPU_FAN_SPEED_RATIO = Gauge(
    "hw_gpu_fan_speed_ratio", "Fan speed as a fraction of its maximum (0..1).", D,
    FanLabels, unit="ratio", sources="NVML fan speed percent; amdgpu pwm1/255",
)
HW_GPU_FAN_SPEED_RPM = Gauge(
    "hw_gpu_fan_speed_rpm", "Fan speed in revolutions per minute.", D, FanLabels,
    unit="rpm", sources="hwmon fan1_input",
)


class ClockLabels(TypedDict):
    hw_gpu_clock_domain: str


HW_GPU_CLOCK = Gauge(
    "hw_gpu_clock_hertz", "Current clock frequency by domain.", D, ClockLabels,
    unit="hertz",
    sources="NVML clock info (MHz); amdgpu freq*_input or pp_dpm_*; i915 gt_act_freq_mhz; "
    "xe freq0/act_freq",
)


class IoLabels(TypedDict):
    network_io_direction: Direction


HW_GPU_IO = Counter(
    "hw_gpu_io_bytes_total", "PCIe traffic.", D, IoLabels, unit="bytes",
    sources="NVML PCIe byte counters (field values) where the driver has them",
)


class ErrorLabels(TypedDict):
    hw_type: Literal["gpu"]
    error_type: ErrorType
    # the link, for NVLink replays and recoveries with --collector.nvidia.nvlink-per-link
    nvlink: NotRequired[str]


HW_ERRORS = Counter(
    "hw_errors_total", "Hardware errors by type.", D, ErrorLabels, fixed=True,
    sources="NVML volatile ECC totals, PCIe replay counter, XID events, NVLink error "
    "totals (per link: DL replay/recovery), PCIe error counts; amdgpu ras/*_err_count, "
    "pcie_replay_count; sysfs AER aer_dev_correctable/nonfatal/fatal TOTAL_ERR_* of the "
    "card's PCI functions (every vendor, NVIDIA where NVML has no PCIe error counts)",
    dcgm="corrected: DCGM_FI_DEV_ECC_SBE_VOL_TOTAL; uncorrected: "
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL; pcie_replay: DCGM_FI_DEV_PCIE_REPLAY_COUNTER; "
    "nvlink_crc_flit, nvlink_crc_data, nvlink_replay, nvlink_recovery: "
    "DCGM_FI_DEV_NVLINK_CRC_FLIT/CRC_DATA/REPLAY/RECOVERY_ERROR_COUNT_TOTAL (per link: "
    "…_L0, …); nvlink_ecc_data, pcie_correctable/nonfatal/fatal, xid: none "
    "(dcgm-exporter's XID field is the last code, not a count: hw_gpu_xid_last_code)",
)


class XidLabels(TypedDict):
    xid: str
    # NVIDIA's Xid Catalog's immediate-action resolution bucket, lower-cased (restart_app,
    # reset_gpu, restart_bm, ignore, workflow_xid_48, ...); unknown: not in the catalog
    action: str


HW_GPU_XID_ERRORS = Counter(
    "hw_gpu_xid_errors_total",
    "XID events by code and by what NVIDIA's Xid Catalog says to do first, counted since "
    "the exporter started.",
    D, XidLabels, sources="NVML event listener (critical XID events); action: "
    "gpu_exporter/model/xid_catalog.csv",
)

HW_GPU_XID_LAST = Gauge(
    "hw_gpu_xid_last_code",
    "The code of the last XID event on the GPU; absent until its first since the exporter "
    "started, then held until the exporter (or its NVML session) starts again.",
    D, NoLabels, sources="NVML event listener (critical XID events)",
    dcgm="DCGM_FI_DEV_XID_ERRORS (DCGM_FI_DEV_XID_ERROR from dcgm-exporter 4.9): the same "
    "code, held the same way (DCGM keeps its field's last value until its host engine "
    "restarts)",
)


class RecoveryActionLabels(TypedDict):
    action: RecoveryAction


HW_GPU_RECOVERY_ACTION = Gauge(
    "hw_gpu_recovery_action",
    "The driver's verdict on what the GPU needs (the recovery action of Xid 154): one "
    "series, the action, at 1.", D, RecoveryActionLabels, fixed=True,
    sources="NVML field value GET_GPU_RECOVERY_ACTION (drivers 570+, Hopper and newer); "
    "values 0-7 of nvml.h, any other value unknown",
)


class RowRemapLabels(TypedDict):
    error_type: Literal["corrected", "uncorrected"]


HW_GPU_MEMORY_REMAPPED_ROWS = Counter(
    "hw_gpu_memory_remapped_rows_total",
    "Memory rows remapped to spare rows, by the ECC error that caused it (Ampere and newer).",
    D, RowRemapLabels, fixed=True,
    sources="NVML field values REMAPPED_COR / REMAPPED_UNC",
    dcgm="DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS / DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
)
HW_GPU_MEMORY_ROW_REMAP_PENDING = Gauge(
    "hw_gpu_memory_row_remap_pending",
    "1 while a row remap waits for the next GPU reset.", D, NoLabels, fixed=True,
    sources="NVML field value REMAPPED_PENDING",
)
HW_GPU_MEMORY_ROW_REMAP_FAILURE = Gauge(
    "hw_gpu_memory_row_remap_failure",
    "1 when a row could not be remapped (no spare rows left: a replacement candidate).", D,
    NoLabels, fixed=True, sources="NVML field value REMAPPED_FAILURE",
    dcgm="DCGM_FI_DEV_ROW_REMAP_FAILURE",
)


class RetiredPagesLabels(TypedDict):
    # corrected: single-bit ECC errors (SBE); uncorrected: double-bit (DBE)
    error_type: Literal["corrected", "uncorrected"]


HW_GPU_MEMORY_RETIRED_PAGES = Counter(
    "hw_gpu_memory_retired_pages_total",
    "Memory pages retired, by the ECC error that caused it (GPUs before Ampere).", D,
    RetiredPagesLabels, fixed=True,
    sources="NVML field values RETIRED_SBE / RETIRED_DBE",
    dcgm="DCGM_FI_DEV_RETIRED_SBE / DCGM_FI_DEV_RETIRED_DBE",
)
HW_GPU_MEMORY_RETIRED_PAGES_PENDING = Gauge(
    "hw_gpu_memory_retired_pages_pending",
    "1 while a page waits to be retired at the next GPU reset or reboot.", D, NoLabels, fixed=True,
    sources="NVML field value RETIRED_PENDING", dcgm="DCGM_FI_DEV_RETIRED_PENDING",
)
HW_GPU_MEMORY_RESERVED = Gauge(
    "hw_gpu_memory_reserved_bytes",
    "Device memory the driver reserves for itself: free = limit - usage - reserved.", D,
    NoLabels, fixed=True, unit="bytes", sources="NVML memory info v2 reserved",
    dcgm="DCGM_FI_DEV_FB_RESERVED (MiB)",
)


class VgpuLicenseLabels(TypedDict):
    state: VgpuLicenseState


HW_GPU_VGPU_LICENSE_STATE = Gauge(
    "hw_gpu_vgpu_license_state",
    "The vGPU guest's licence state; exactly one state is 1 (vGPU guests only).", D,
    VgpuLicenseLabels, fixed=True,
    sources="NVML nvmlDeviceGetGridLicensableFeatures (the vGPU feature's licence state)",
    dcgm="DCGM_FI_DEV_VGPU_LICENSE_STATUS",
)


class ReasonLabels(TypedDict):
    reason: str


HW_GPU_CLOCK_THROTTLE = Gauge(
    "hw_gpu_clock_throttle_active", "1 while the clock event reason is active.", D,
    ReasonLabels, sources="NVML current clocks event reasons",
)


class StatusLabels(TypedDict):
    hw_type: Literal["gpu"]
    hw_state: HealthState


HW_STATUS = Gauge(
    "hw_status", "Health state; exactly one hw_state is 1.", D, StatusLabels,
    sources="derived: failed when lost, uncorrected errors pending, a row remap failed, "
    "after an XID whose Xid Catalog action is a reset or reboot, or when the driver's "
    "recovery action asks for a reset or reboot; degraded when throttled by hardware, "
    "pages/rows pending retirement/remap, or the recovery action is drain_p2p or "
    "recover_imex_domain; else ok",
)

# --- interconnect: the PCIe link to the slot, NVLink -------------------------------------
# The card-to-slot link: sysfs of the card's end of it (the upstream port of the card's own
# PCIe switch where it has one, else the GPU), max the lower of both ends' maxima; NVML's
# max is already the lower of the GPU's and the slot's.
_CARD_END = "of the card's end of the slot link (its own switch's upstream port, if any)"
_BOTH_ENDS = "the lower of the card's and the slot's"
HW_GPU_PCIE_CURRENT_LINK_WIDTH = Gauge(
    "hw_gpu_pcie_current_link_width", "Lanes the PCIe link to the slot runs at now.", D,
    NoLabels, sources=f"NVML current PCIe link width; sysfs current_link_width {_CARD_END}",
    dcgm="DCGM_FI_DEV_PCIE_LINK_WIDTH",
)
HW_GPU_PCIE_MAX_LINK_WIDTH = Gauge(
    "hw_gpu_pcie_max_link_width", "Most lanes the card and its slot allow on that link.", D,
    NoLabels, sources=f"NVML max PCIe link width; sysfs max_link_width, {_BOTH_ENDS}",
    dcgm="DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH",
)
HW_GPU_PCIE_CURRENT_LINK_TRANSFERS = Gauge(
    "hw_gpu_pcie_current_link_transfers_per_second",
    "Transfers per second per lane of the PCIe link to the slot now (16e9: PCIe 4.0).", D,
    NoLabels, sources="NVML current PCIe link generation (1: 2.5e9, 2: 5e9, 3: 8e9, "
    f"4: 16e9, 5: 32e9, 6: 64e9); sysfs current_link_speed {_CARD_END}",
    dcgm="DCGM_FI_DEV_PCIE_LINK_GEN (the generation)",
)
HW_GPU_PCIE_MAX_LINK_TRANSFERS = Gauge(
    "hw_gpu_pcie_max_link_transfers_per_second",
    "Most transfers per second per lane the card and its slot allow on that link.", D,
    NoLabels, sources=f"NVML max PCIe link generation; sysfs max_link_speed, {_BOTH_ENDS}",
    dcgm="DCGM_FI_DEV_PCIE_MAX_LINK_GEN (the generation)",
)


class NvlinkIoLabels(IoLabels):
    nvlink: NotRequired[str]  # the link, with --collector.nvidia.nvlink-per-link


HW_GPU_NVLINK_IO = Counter(
    "hw_gpu_nvlink_io_bytes_total", "NVLink payload traffic (protocol overhead excluded).",
    D, NvlinkIoLabels, unit="bytes",
    sources="NVML field values NVLINK_THROUGHPUT_DATA_TX/RX (KiB), all links together "
    "(scope 0xFFFFFFFF) or per link",
    dcgm="rate(): DCGM_FI_PROF_NVLINK_TX_BYTES / DCGM_FI_PROF_NVLINK_RX_BYTES; both "
    "directions summed: DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
)


class NvlinkStateLabels(TypedDict):
    nvlink_state: NvlinkState
    nvlink: NotRequired[str]  # the link (1 in its state, 0 in the others), per link


class NicLinkLabels(TypedDict):
    nic_link_state: Literal["up", "down"]
    # "external": a scale-out port (to the cluster's switches); "internal": a port wired
    # to another card of the same box
    nic_scope: Literal["external", "internal"]


HW_GPU_NIC_LINKS = Gauge(
    "hw_gpu_nic_links", "Ports of the card's own NICs (Gaudi's RoCE Ethernet) in each link "
    "state, external (scale-out) and internal (card to card) apart.", D, NicLinkLabels,
    sources="HLML hlml_get_mac_addr_info (the ports, and which are external) and "
    "hlml_nic_get_link per port; 4 series per card; cards without NICs have none",
    dcgm="none (NVIDIA has NVLink: hw_gpu_nvlink_links)",
)


HW_GPU_NVLINK_LINKS = Gauge(
    "hw_gpu_nvlink_links", "NVLinks of the GPU in each state.", D, NvlinkStateLabels,
    sources="NVML field values NVLINK_LINK_COUNT (once) and NVLINK_GET_STATE per link "
    "(NVML_NVLINK_STATE_*); GPUs without NVLink have none",
    dcgm="none (dcgmi nvlink --link-status)",
)

# --- GPM (NVIDIA Hopper and newer): what the GPU really does ------------------------------
# Averages over the time between the previous scrape's sample and this one's
# (gpu_exporter_gpm_window_seconds). Each equals a DCGM profiling field (`dcgm`), so that
# dcgm-exporter queries translate one to one.


class GpmLabels(TypedDict, total=False):
    # A MIG GPU instance shared by several compute instances: reported once, on its
    # parent GPU's series (one with a single compute instance reports on that MIG device).
    gpu_instance_id: str


def _gpm_ratio(name: str, help: str, field: str, dcgm: str) -> Gauge[GpmLabels]:
    """A fraction (0..1) from NVML's GPM metric `field`."""
    return Gauge(name, f"{help} (0..1, GPM).", D, GpmLabels, unit="ratio",
                 sources=f"NVML GPM {field}", dcgm=dcgm)


HW_GPU_ENGINE_ACTIVE = _gpm_ratio(
    "hw_gpu_engine_active_ratio", "Fraction of time the graphics/compute engine was active",
    "GRAPHICS_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
HW_GPU_SM_ACTIVE = _gpm_ratio(
    "hw_gpu_sm_active_ratio",
    "Fraction of SMs with at least one warp resident, averaged over time", "SM_UTIL",
    "DCGM_FI_PROF_SM_ACTIVE")
HW_GPU_SM_OCCUPANCY = _gpm_ratio(
    "hw_gpu_sm_occupancy_ratio", "Resident warps over the SMs' maximum, averaged over time",
    "SM_OCCUPANCY", "DCGM_FI_PROF_SM_OCCUPANCY")
HW_GPU_TENSOR_ACTIVE = _gpm_ratio(
    "hw_gpu_tensor_active_ratio", "Fraction of time any tensor pipe was active",
    "ANY_TENSOR_UTIL", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")

class PipeLabels(GpmLabels, total=True):
    hw_gpu_pipe: GpmPipe


HW_GPU_PIPE_ACTIVE = Gauge(
    "hw_gpu_pipe_active_ratio", "Fraction of time the pipe was active (0..1, GPM).", D,
    PipeLabels, unit="ratio",
    sources="NVML GPM HMMA/IMMA/DFMA/DMMA_TENSOR_UTIL, FP64/FP32/FP16/INTEGER_UTIL",
    dcgm="DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE (tensor_hmma), _TENSOR_IMMA_ACTIVE "
    "(tensor_imma), _TENSOR_DFMA_ACTIVE (tensor_dfma), _FP64_ACTIVE (fp64), _FP32_ACTIVE "
    "(fp32), _FP16_ACTIVE (fp16), _INT_ACTIVE (integer); none for tensor_dmma",
)
HW_GPU_DRAM_ACTIVE = _gpm_ratio(
    "hw_gpu_dram_active_ratio", "Fraction of the device memory bandwidth used",
    "DRAM_BW_UTIL", "DCGM_FI_PROF_DRAM_ACTIVE")

# --- per-process families ----------------------------------------------------------------
PROCESS_GPU_MEMORY_USAGE = Gauge(
    "process_gpu_memory_usage_bytes", "Device memory used by the process.", P,
    ProcessLabels, unit="bytes",
    sources="NVML running compute/graphics processes; DRM fdinfo drm-memory-vram",
)


class ProcessTaskLabels(ProcessLabels):
    hw_gpu_task: GpuTask


PROCESS_GPU_UTILIZATION = Gauge(
    "process_gpu_utilization_ratio",
    "Fraction of the interval the process kept the engine busy (0..1).", P,
    ProcessTaskLabels, unit="ratio",
    sources="NVML process utilization samples; DRM fdinfo engine time deltas",
)

PROCESS_GPU_ENERGY = Counter(
    "process_gpu_energy_consumed_joules_total",
    "The GPU's energy split among the processes on it by their share of its activity in "
    "each interval, idle time included (the holder pays); starts at 0 when the process is "
    "first seen on the GPU.", P, ProcessLabels, unit="joules",
    sources="increase of hw_gpu_energy_consumed_joules_total between scrapes, shared by the "
    "sum of smUtil of each process's NVML utilization samples (DRM fdinfo engine busy time "
    "for AMD and Intel); MIG: by GPM engine activity or compute slices, then per process "
    "(docs/attribution.md)",
)

# --- attribution and allocation ----------------------------------------------------------


class UnattributedLabels(TypedDict):
    reason: Literal["no_process", "no_activity_data"]


HW_GPU_ENERGY_UNATTRIBUTED = Counter(
    "hw_gpu_energy_unattributed_joules_total",
    "The GPU's energy no process was charged for, by reason: with "
    "process_gpu_energy_consumed_joules_total it adds up to the increase of "
    "hw_gpu_energy_consumed_joules_total since the exporter's first reading of the GPU.", D,
    UnattributedLabels, unit="joules",
    sources="no_process: no process on the GPU throughout the interval; no_activity_data: "
    "processes there but no per-process activity from the driver (docs/attribution.md)",
)


class GpuAllocationLabels(PodLabels):
    # the DRA ResourceClaim that gave the GPU (OpenTelemetry has no name for it yet; the
    # k8s.<kind>.name pattern); absent for a device plugin's GPU
    k8s_resourceclaim_name: NotRequired[str]


K8S_GPU_ALLOCATION_INFO = Gauge(
    "k8s_gpu_allocation_info",
    "1 for each GPU (or MIG device) the kubelet has assigned to a container of a running "
    "pod, whether or not anything runs on it.", D, GpuAllocationLabels,
    sources="kubelet PodResources List: device plugins' devices, and DRA claims' CDI "
    "devices resolved through the node's CDI spec files; finished pods it still lists "
    "(kubernetes#119423) left out by their pod log directory and cgroup",
)

# --- CUDA activity (eBPF) ----------------------------------------------------------------


class CudaLabels(TypedDict):
    process_pid: NotRequired[str]  # with --ebpf.pid-label


class ExecutableLabels(CudaLabels):
    process_executable_name: str


class LaunchLabels(ExecutableLabels):
    cuda_kernel_name: str
    # runtime | driver | graph (CUDA); hip | hip_module | hip_graph (AMD's HIP, issue #23:
    # the label keeps its name so that one query finds both, docs/ebpf.md)
    cuda_api: abi.CudaApi


GPU_KERNEL_LAUNCH_CALLS = Counter(
    "gpu_kernel_launch_calls_total",
    "CUDA and HIP kernel launches that succeeded (a graph launch: one per kernel node of "
    "the graph).",
    C, LaunchLabels,
    fixed=True,
    sources="uprobes on " + abi.calls_of(abi.LAUNCH_PROGRAMS),
)

GPU_KERNEL_GRID_SIZE = Histogram(
    "gpu_kernel_grid_size", "Blocks per grid of launched kernels.", C, ExecutableLabels,
    sources="launch arguments",
)
GPU_KERNEL_BLOCK_SIZE = Histogram(
    "gpu_kernel_block_size", "Threads per block of launched kernels.", C, ExecutableLabels,
    sources="launch arguments",
)


class KernelDurationLabels(CudaLabels):
    cuda_kernel_name: str
    gpu_measurement_source: Literal["ebpf_model"]
    # What bounded the kernel's completion: an event or stream query on its own stream
    # ("event"), or a stream/device/context synchronise ("sync_fallback"). docs/ebpf.md.
    completion: Literal["event", "sync_fallback"]


GPU_KERNEL_DURATION = Histogram(
    "gpu_kernel_duration_seconds",
    "Upper bound on a kernel's execution time: from its launch (or the latest not-ready "
    "answer before it) to the first completion point seen to cover it; one sample per "
    "launch, a group of launches between two completion points sharing one bound.", C,
    KernelDurationLabels, unit="seconds",
    sources="launch, event record, event/stream query and synchronise uprobes",
)


class CopyLabels(ExecutableLabels):
    cuda_memcpy_kind: str


GPU_MEMORY_COPIES = Histogram(
    "gpu_memory_copies_bytes", "Bytes per successful memory copy call, sync and async.", C,
    CopyLabels, unit="bytes", fixed=True,
    sources="uprobes on " + abi.calls_of(abi.COPY_PROGRAMS),
)


class AllocationLabels(ExecutableLabels):
    cuda_api: abi.CudaApi  # runtime | driver | hip
    # device (cudaMalloc*), managed (cudaMallocManaged), host (pinned: cudaMallocHost,
    # cudaHostAlloc, cuMemHostAlloc): host memory is not GPU memory
    cuda_memory_type: abi.MemoryType


GPU_MEMORY_ALLOCATIONS = Histogram(
    "gpu_memory_allocations_bytes", "Bytes per successful allocation call.", C, AllocationLabels,
    unit="bytes", sources="uprobes on " + abi.calls_of(abi.ALLOC_PROGRAMS),
)


class SyncLabels(CudaLabels):
    cuda_sync_call: str


class KernelLabels(CudaLabels):
    cuda_kernel_name: str


GPU_KERNEL_ELAPSED = Histogram(
    "gpu_kernel_elapsed_seconds",
    "The application's own cudaEventElapsedTime (or hipEventElapsedTime) between two events "
    "recorded around exactly one launch on one stream: that kernel's GPU time (exact; idle "
    "gaps between the events included).", C, KernelLabels, unit="seconds",
    sources="uprobes on cudaEventElapsedTime, cuEventElapsedTime, hipEventElapsedTime and "
            "the event records",
)

GPU_STREAM_WAITS = Counter(
    "gpu_stream_waits_total",
    "Successful cudaStreamWaitEvent / cuStreamWaitEvent / hipStreamWaitEvent calls: a stream "
    "made to wait for an event of another.", C, ExecutableLabels,
    sources="uprobes on cudaStreamWaitEvent, cuStreamWaitEvent, hipStreamWaitEvent",
)

GPU_STREAM_WAIT_BOUND = Histogram(
    "gpu_stream_wait_bound_seconds",
    "Upper bound on the time a stream wait held its stream: from the wait call to the first "
    "completion seen of the awaited event (waits whose event is never seen complete have "
    "no sample).", C, ExecutableLabels, unit="seconds",
    sources="uprobes on cudaStreamWaitEvent, cuStreamWaitEvent, hipStreamWaitEvent and the "
            "event's queries and synchronises",
)


GPU_SYNC_DURATION = Histogram(
    "gpu_sync_duration_seconds", "Time blocked in synchronising calls that succeeded.", C,
    SyncLabels, unit="seconds",
    sources="uprobe/uretprobe pairs on " + abi.calls_of(abi.SYNC_PROGRAMS),
)


class CudaErrorLabels(ExecutableLabels):
    cuda_call: str  # the entry point as documented: cudaMemcpyAsync, cuLaunchKernel, hipMalloc
    # cudaErrorNoDevice, CUDA_ERROR_NOT_INITIALIZED, hipErrorNoDevice; the number if unknown
    error_type: str


GPU_CUDA_ERRORS = Counter(
    "gpu_cuda_errors_total",
    "CUDA and HIP calls that returned an error (not counted as launches, copies, "
    "allocations or synchronisations).", C, CudaErrorLabels,
    sources="the return value of every probed call (uretprobes); names from the CUDA "
    "libraries' own cudaGetErrorName/cuGetErrorName (libcudart 11.8, 12.9, 13.x; libcuda "
    "535 and the CUresult enum of CUDA 12.9/13.x's cuda.h), hipGetErrorName (libamdhip64 "
    "of ROCm 5.2), the number for a newer code",
)

# --- host --------------------------------------------------------------------------------
class NodePowerLabels(TypedDict):
    hw_type: str  # OpenTelemetry hw.type: "cpu", "memory"; "module" (a superchip), "system"
    hw_id: str  # the socket ("socket0") or module ("module0"); "system": the ACPI device
    # what the source calls the rail: RAPL's "package", "dram", "core"; the ACPI power
    # meter's "socket", "cpu", "sysio", "module" (Grace), "system" (a whole-node meter)
    hw_power_rail: str


HW_POWER = Gauge(
    "hw_power_watts",
    "Power of a part of the node other than a GPU (OpenTelemetry hw.power): a CPU "
    "socket, its memory, a superchip module.", H, NodePowerLabels, unit="watts",
    sources="ACPI power meter power1_average (µW); RAPL powercap energy_uj between "
    "scrapes; NVML module power scope (mW, once per nvmlDeviceGetPlatformInfo module). "
    "One source per rail: docs/node-power.md",
)
HW_ENERGY = Counter(
    "hw_energy_joules_total",
    "Energy of a part of the node other than a GPU (OpenTelemetry hw.energy); never goes "
    "back across the counter's wrap.", H, NodePowerLabels, unit="joules",
    sources="RAPL powercap energy_uj (µJ), its wrap at max_energy_range_uj added",
)


SYSTEM_CPU_UTILIZATION = Gauge(
    "system_cpu_utilization_ratio", "CPU busy fraction since the last scrape (0..1).",
    H, NoLabels, unit="ratio", sources="/proc/stat",
)


class MemoryStateLabels(TypedDict):
    system_memory_state: str


SYSTEM_MEMORY_USAGE = Gauge(
    "system_memory_usage_bytes", "Memory by state.", H, MemoryStateLabels, unit="bytes",
    sources="/proc/meminfo",
)
SYSTEM_MEMORY_UTILIZATION = Gauge(
    "system_memory_utilization_ratio", "Memory in use over total (0..1).", H, NoLabels,
    unit="ratio", sources="/proc/meminfo",
)


class SystemDeviceLabels(TypedDict):
    system_device: str


class FilesystemLabels(SystemDeviceLabels):
    system_filesystem_mountpoint: str
    system_filesystem_type: str
    system_filesystem_state: str


SYSTEM_FILESYSTEM_USAGE = Gauge(
    "system_filesystem_usage_bytes", "Filesystem space by state.", H, FilesystemLabels,
    unit="bytes", sources="statvfs of mounted filesystems",
)


class DiskIoLabels(SystemDeviceLabels):
    disk_io_direction: Literal["read", "write"]


SYSTEM_DISK_IO = Counter(
    "system_disk_io_bytes_total", "Disk traffic.", H, DiskIoLabels, unit="bytes",
    sources="/proc/diskstats",
)


class NetworkLabels(IoLabels):
    network_interface_name: str


SYSTEM_NETWORK_IO = Counter(
    "system_network_io_bytes_total", "Network traffic per interface.", H, NetworkLabels,
    unit="bytes", sources="netlink interface statistics",
)
SYSTEM_NETWORK_ERRORS = Counter(
    "system_network_errors_total", "Network errors per interface.", H, NetworkLabels,
    sources="netlink interface statistics",
)

# --- the exporter itself -----------------------------------------------------------------


class BuildLabels(TypedDict):
    version: str
    python_version: str
    nvml_bindings_version: NotRequired[str]  # absent without nvidia-ml-py


BUILD_INFO = Gauge(
    "gpu_exporter_build_info", "Exporter version, always 1.", S, BuildLabels,
)


class CollectorLabels(TypedDict):
    collector: str


COLLECTOR_SUCCESS = Gauge(
    "gpu_exporter_collector_success",
    "1 when the collector read everything it should this scrape.", S, CollectorLabels,
)
COLLECTOR_DURATION = Gauge(
    "gpu_exporter_collector_duration_seconds", "Time the collector took this scrape.",
    S, CollectorLabels, unit="seconds",
)


class GpmWindowLabels(GpmLabels, total=True):
    hw_id: str


GPM_WINDOW = Gauge(
    "gpu_exporter_gpm_window_seconds",
    "Time the GPM values of the device cover: between the two samples they come from.", S,
    GpmWindowLabels, unit="seconds",
    sources="the previous GPM sample's time to this one's; a scrape within 100 ms of it "
    "serves the last values and their window",
)


class FeatureLabels(TypedDict):
    feature: str
    state: Literal["enabled", "unavailable", "disabled"]
    hw_id: NotRequired[str]  # a feature whose state differs from device to device


FEATURE_STATUS = Gauge(
    "gpu_exporter_feature_status",
    "Feature state; exactly one state is 1 per feature.", S, FeatureLabels,
)
EBPF_EVENTS_DROPPED = Counter(
    "gpu_exporter_ebpf_events_dropped_total",
    "eBPF events lost because a bounded map or buffer was full.", S, ReasonLabels,
)


class LibraryLabels(TypedDict):
    library: str


EBPF_ATTACHED_LIBRARIES = Gauge(
    "gpu_exporter_ebpf_attached_libraries", "CUDA library files with probes attached.",
    S, LibraryLabels,
)
EBPF_KERNEL_NAMES_OVERFLOW = Counter(
    "gpu_exporter_ebpf_kernel_names_overflow_total",
    "Launches of kernels beyond the name cap, reported as cuda_kernel_name=\"other\".", S,
    NoLabels,
)
EBPF_EXECUTABLES_FOLDED = Counter(
    "gpu_exporter_ebpf_executables_folded_total",
    "Processes whose executable name was beyond --ebpf.executable-names-max, reported "
    "as process_executable_name=\"other\" for their life; each counted once.", S,
    NoLabels,
)

PROCESSES_FOLDED = Counter(
    "gpu_exporter_processes_folded_total",
    "Processes beyond --processes.max-per-gpu on a GPU, reported in its "
    "process_executable_name=\"other\" series; each counted once.", S, NoLabels,
)


class CacheResultLabels(TypedDict):
    result: Literal["hit", "miss"]


PROCESS_FACTS_CACHE_LOOKUPS = Counter(
    "gpu_exporter_process_facts_cache_lookups_total",
    "Lookups of a live GPU process's facts (executable, cgroup: container, pod, job) by "
    "whether they were cached from an earlier scrape (hit) or read from procfs (miss).",
    S, CacheResultLabels,
    sources="the processes collector's cache by (pid, start time), at most 8192 "
    "processes (readers/procfs/procinfo.py); both results reported, 0 until they happen",
)

DRA_DEVICES_UNRESOLVED = Gauge(
    "gpu_exporter_dra_devices_unresolved",
    "Devices of GPU drivers' DRA claims that the kubelet lists and the node's CDI specs "
    "do not resolve to a GPU (never guessed: processes.dra names them); absent until "
    "the kubelet has listed a claim, and while it does not answer.", S, NoLabels,
)

# --- the HTTP front (its own collector, gpu_exporter/http/selfmetrics.py: last in a scrape)

# Why the HTTP front closed a connection before (or instead of) answering it in full
# (gpu_exporter/http/server.py; docs/web-front.md, "Limits").
HttpRefusalReason = Literal[
    "connection_limit",  # 512 connections open, all busy: the new one gets 503 and a close
    "evicted",  # an idle connection closed to make room for a new one at that limit
    "file_descriptor_limit",  # an idle connection closed: accept() hit `ulimit -n`
    "head_timeout",  # no complete request head (or TLS handshake) in time
    "head_too_large",  # request head past 16 KiB: 431
    "malformed_request",  # a head h11 cannot parse, no Host, both framings, HTTP/2: 400/505
    "body_too_large",  # a GET/HEAD body past 64 KiB: 413
    "slow_client",  # a body not sent, or the answer not read, within 10 s
    "tls_handshake",  # plain HTTP to the TLS port, a failed handshake, a SAN not allowed
    "client_gone",  # the client went away before or while its answer was sent
    "pipeline_limit",  # more than 8 pipelined requests in a row: 503
]


class HttpRefusalLabels(TypedDict):
    reason: HttpRefusalReason


HTTP_CONNECTIONS_REFUSED = Counter(
    "gpu_exporter_http_connections_refused_total",
    "Connections the HTTP front refused or closed early, by reason (each counted once).",
    S, HttpRefusalLabels,
    sources="the HTTP front's limits (docs/web-front.md); every reason is reported, 0 "
    "until it happens",
)

CATALOGUE: tuple[Family[Any], ...] = tuple(
    m for m in globals().values() if isinstance(m, Family)
)
BY_NAME: dict[str, Family[Any]] = {m.name: m for m in CATALOGUE}
# Families the HTTP front emits, with a collector of its own; a scrape emits the others.
HTTP_FAMILIES: tuple[Family[Any], ...] = (HTTP_CONNECTIONS_REFUSED,)
SCRAPE_FAMILIES: tuple[Family[Any], ...] = tuple(
    m for m in CATALOGUE if m not in HTTP_FAMILIES)

# Scope label names, for the places that list them (rules, vmagent config, docs).
DEVICE_LABELS: tuple[str, ...] = DEVICE_LABEL_SET.names
PROCESS_LABELS: tuple[str, ...] = PROCESS_LABEL_SET.names
# Every label name a series of the exporter may carry but the resource labels.
ALL_LABELS: frozenset[str] = frozenset(n for m in CATALOGUE for n in m.schema.names)
