"""The one metric catalogue: every family the exporter can emit.

The collectors build their families from these entries, and `docs/metrics.md` is
generated from them (`make docs`; a test fails when the file is stale). Add a metric
here first, then emit it from a collector.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from opentelemetry.semconv._incubating.attributes import hw_attributes as hw


def prom_label(otel_attribute: str) -> str:
    """OpenTelemetry attribute name to Prometheus label name (dots to underscores)."""
    return otel_attribute.replace(".", "_")


# Label names taken from the OpenTelemetry constants rather than retyped.
HW_ID = prom_label(hw.HW_ID)
HW_NAME = prom_label(hw.HW_NAME)
HW_VENDOR = prom_label(hw.HW_VENDOR)
HW_MODEL = prom_label(hw.HW_MODEL)
HW_PARENT = prom_label(hw.HW_PARENT)
HW_TYPE = prom_label(hw.HW_TYPE)
HW_STATE = prom_label(hw.HW_STATE)
HW_GPU_TASK = prom_label(hw.HW_GPU_TASK)
HW_DRIVER_VERSION = prom_label(hw.HW_DRIVER_VERSION)
HW_FIRMWARE_VERSION = prom_label(hw.HW_FIRMWARE_VERSION)
HW_SERIAL_NUMBER = prom_label(hw.HW_SERIAL_NUMBER)
GPU_INDEX = "gpu_index"
GPU_PCI_ADDRESS = "gpu_pci_address"
GPU_MIG_PROFILE = "gpu_mig_profile"

DEVICE_LABELS: tuple[str, ...] = (HW_ID, HW_NAME, HW_VENDOR, GPU_INDEX, GPU_PCI_ADDRESS)
MIG_LABELS: tuple[str, ...] = (HW_PARENT, GPU_MIG_PROFILE)
PROCESS_LABELS: tuple[str, ...] = (
    "process_pid",
    "process_executable_name",
    "container_id",
    "k8s_pod_name",
    "k8s_namespace_name",
    # beyond the spec's list, same vocabulary: the pod uid from the cgroup path (known
    # without a kubelet) and the container name from the kubelet's PodResources
    "k8s_pod_uid",
    "k8s_container_name",
)


class Kind(Enum):
    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


class Scope(Enum):
    """Which label set a family carries besides its own labels."""

    DEVICE = "device"  # device labels + resource labels
    PROCESS = "process"  # device labels + process labels + resource labels
    CUDA = "cuda"  # eBPF families: own labels, device labels when the device is known
    HOST = "host"
    SELF = "self"


@dataclass(frozen=True)
class Metric:
    name: str  # the Prometheus name, `_total` included for counters
    kind: Kind
    help: str
    scope: Scope
    labels: tuple[str, ...] = ()  # the family's own labels (not device/resource ones)
    unit: str = ""  # base unit suffix of the name, "" when none
    fixed: bool = False  # name appears in public queries: never rename
    sources: str = ""  # where the value comes from, for the reference

    @property
    def family_name(self) -> str:
        """Name as prometheus_client wants it (counters without `_total`)."""
        if self.kind is Kind.COUNTER and self.name.endswith("_total"):
            return self.name[: -len("_total")]
        return self.name


D, P, C, H, S = Scope.DEVICE, Scope.PROCESS, Scope.CUDA, Scope.HOST, Scope.SELF
GAUGE, COUNTER, HISTOGRAM = Kind.GAUGE, Kind.COUNTER, Kind.HISTOGRAM

# --- device families -------------------------------------------------------------------
HW_GPU_INFO = Metric(
    "hw_gpu_info", GAUGE, "GPU identity, always 1; join on hw_id.", D,
    (HW_MODEL, HW_DRIVER_VERSION, HW_FIRMWARE_VERSION, HW_SERIAL_NUMBER),
    sources="NVML name/serial/VBIOS, driver version; amdgpu product_name, vbios_version, "
    "serial_number; Intel PCI ids",
)
HW_GPU_UP = Metric(
    "hw_gpu_up", GAUGE,
    "1 when the device answered this scrape, 0 when a known device is lost, hung or "
    "unreadable.", D,
)
HW_GPU_UTILIZATION = Metric(
    "hw_gpu_utilization_ratio", GAUGE, "Fraction of time the engine was busy (0..1).", D,
    (HW_GPU_TASK,), unit="ratio", fixed=True,
    sources="NVML utilization rates, encoder and decoder utilization; amdgpu "
    "gpu_busy_percent; Intel DRM fdinfo engine time",
)
HW_GPU_MEMORY_USAGE = Metric(
    "hw_gpu_memory_usage_bytes", GAUGE, "Device memory in use.", D, unit="bytes", fixed=True,
    sources="NVML memory info v2 used (v1 on old drivers); amdgpu mem_info_vram_used",
)
HW_GPU_MEMORY_LIMIT = Metric(
    "hw_gpu_memory_limit_bytes", GAUGE, "Device memory size.", D, unit="bytes", fixed=True,
    sources="NVML memory total; amdgpu mem_info_vram_total; xe physical_vram_size_bytes",
)
HW_GPU_MEMORY_UTILIZATION = Metric(
    "hw_gpu_memory_utilization_ratio", GAUGE, "Device memory in use over its size (0..1).", D,
    unit="ratio", sources="usage / limit, when both are known",
)
HW_GPU_MEMORY_CONTROLLER_UTILIZATION = Metric(
    "hw_gpu_memory_controller_utilization_ratio", GAUGE,
    "Fraction of time the memory controller was busy (0..1).", D, unit="ratio",
    sources="NVML utilization rates (memory); amdgpu mem_busy_percent",
)
HW_GPU_POWER_DRAW = Metric(
    "hw_gpu_power_draw_watts", GAUGE, "Power drawn by the device.", D, unit="watts",
    fixed=True,
    sources="NVML power usage (mW); amdgpu hwmon power1_average/power1_input (µW); Intel "
    "derived from the energy counter between scrapes",
)
HW_GPU_POWER_LIMIT = Metric(
    "hw_gpu_power_limit_watts", GAUGE, "Enforced power limit.", D, unit="watts", fixed=True,
    sources="NVML enforced power limit; amdgpu power1_cap; Intel power1_max",
)
HW_GPU_ENERGY = Metric(
    "hw_gpu_energy_consumed_joules_total", COUNTER, "Energy consumed by the device.", D,
    unit="joules", fixed=True,
    sources="NVML total energy consumption (mJ); amdgpu gpu_metrics energy accumulator; "
    "Intel hwmon energy1_input (µJ)",
)
HW_GPU_TEMPERATURE = Metric(
    "hw_gpu_temperature_celsius", GAUGE, "Temperature by sensor.", D, ("sensor",),
    unit="celsius", fixed=True,
    sources="NVML GPU and memory temperature; amdgpu/Intel hwmon temp*_input by label",
)
HW_GPU_FAN_SPEED_RATIO = Metric(
    "hw_gpu_fan_speed_ratio", GAUGE, "Fan speed as a fraction of its maximum (0..1).", D,
    ("fan",), unit="ratio", sources="NVML fan speed percent; amdgpu pwm1/255",
)
HW_GPU_FAN_SPEED_RPM = Metric(
    "hw_gpu_fan_speed_rpm", GAUGE, "Fan speed in revolutions per minute.", D, ("fan",),
    unit="rpm", sources="hwmon fan1_input",
)
HW_GPU_CLOCK = Metric(
    "hw_gpu_clock_hertz", GAUGE, "Current clock frequency by domain.", D,
    ("hw_gpu_clock_domain",), unit="hertz",
    sources="NVML clock info (MHz); amdgpu freq*_input or pp_dpm_*; i915 gt_act_freq_mhz; "
    "xe freq0/act_freq",
)
HW_GPU_IO = Metric(
    "hw_gpu_io_bytes_total", COUNTER, "PCIe traffic.", D, ("network_io_direction",),
    unit="bytes", sources="NVML PCIe byte counters (field values) where the driver has them",
)
HW_ERRORS = Metric(
    "hw_errors_total", COUNTER, "Hardware errors by type.", D, (HW_TYPE, "error_type"),
    fixed=True,
    sources="NVML volatile ECC totals, PCIe replay counter, XID events; amdgpu "
    "ras/*_err_count, pcie_replay_count",
)
HW_GPU_XID_ERRORS = Metric(
    "hw_gpu_xid_errors_total", COUNTER,
    "XID events by code, counted since the exporter started.", D, ("xid",),
    sources="NVML event listener (critical XID events)",
)
HW_GPU_CLOCK_THROTTLE = Metric(
    "hw_gpu_clock_throttle_active", GAUGE, "1 while the clock event reason is active.", D,
    ("reason",), sources="NVML current clocks event reasons",
)
HW_STATUS = Metric(
    "hw_status", GAUGE, "Health state; exactly one hw_state is 1.", D, (HW_TYPE, HW_STATE),
    sources="derived: failed when lost or uncorrected errors pending, degraded when "
    "throttled by hardware or retired pages pending, else ok",
)

# --- per-process families ----------------------------------------------------------------
PROCESS_GPU_MEMORY_USAGE = Metric(
    "process_gpu_memory_usage_bytes", GAUGE, "Device memory used by the process.", P,
    unit="bytes",
    sources="NVML running compute/graphics processes; DRM fdinfo drm-memory-vram",
)
PROCESS_GPU_UTILIZATION = Metric(
    "process_gpu_utilization_ratio", GAUGE,
    "Fraction of the interval the process kept the engine busy (0..1).", P, (HW_GPU_TASK,),
    unit="ratio", sources="NVML process utilization samples; DRM fdinfo engine time deltas",
)

# --- CUDA activity (eBPF) ----------------------------------------------------------------
GPU_KERNEL_LAUNCH_CALLS = Metric(
    "gpu_kernel_launch_calls_total", COUNTER, "CUDA kernel launches.", C,
    ("cuda_kernel_name", "process_executable_name", "cuda_api"), fixed=True,
    sources="uprobes on cudaLaunchKernel*, cudaGraphLaunch, cuLaunchKernel*",
)
GPU_KERNEL_GRID_SIZE = Metric(
    "gpu_kernel_grid_size", HISTOGRAM, "Blocks per grid of launched kernels.", C,
    ("process_executable_name",), sources="launch arguments",
)
GPU_KERNEL_BLOCK_SIZE = Metric(
    "gpu_kernel_block_size", HISTOGRAM, "Threads per block of launched kernels.", C,
    ("process_executable_name",), sources="launch arguments",
)
GPU_KERNEL_DURATION = Metric(
    "gpu_kernel_duration_seconds", HISTOGRAM,
    "Time from launch to the synchronising call that covered it (a model, not device "
    "execution time).", C, ("cuda_kernel_name", "gpu_measurement_source"), unit="seconds",
    sources="launch and synchronise uprobes",
)
GPU_MEMORY_COPIES = Metric(
    "gpu_memory_copies_bytes", HISTOGRAM, "Bytes per memory copy call, sync and async.", C,
    ("cuda_memcpy_kind", "process_executable_name"), unit="bytes", fixed=True,
    sources="uprobes on cudaMemcpy*, cuMemcpy*",
)
GPU_MEMORY_ALLOCATIONS = Metric(
    "gpu_memory_allocations_bytes", HISTOGRAM, "Bytes per allocation call.", C,
    ("process_executable_name", "cuda_api"), unit="bytes",
    sources="uprobes on cudaMalloc*, cuMemAlloc*",
)
GPU_SYNC_DURATION = Metric(
    "gpu_sync_duration_seconds", HISTOGRAM, "Time blocked in synchronising calls.", C,
    ("cuda_sync_call",), unit="seconds",
    sources="uprobe/uretprobe pairs on *Synchronize",
)

# --- host --------------------------------------------------------------------------------
SYSTEM_CPU_UTILIZATION = Metric(
    "system_cpu_utilization_ratio", GAUGE, "CPU busy fraction since the last scrape (0..1).",
    H, unit="ratio", sources="/proc/stat",
)
SYSTEM_MEMORY_USAGE = Metric(
    "system_memory_usage_bytes", GAUGE, "Memory by state.", H, ("system_memory_state",),
    unit="bytes", sources="/proc/meminfo",
)
SYSTEM_MEMORY_UTILIZATION = Metric(
    "system_memory_utilization_ratio", GAUGE, "Memory in use over total (0..1).", H,
    unit="ratio", sources="/proc/meminfo",
)
SYSTEM_FILESYSTEM_USAGE = Metric(
    "system_filesystem_usage_bytes", GAUGE, "Filesystem space by state.", H,
    ("system_device", "system_filesystem_mountpoint", "system_filesystem_type",
     "system_filesystem_state"),
    unit="bytes", sources="statvfs of mounted filesystems",
)
SYSTEM_DISK_IO = Metric(
    "system_disk_io_bytes_total", COUNTER, "Disk traffic.", H,
    ("system_device", "disk_io_direction"), unit="bytes", sources="/proc/diskstats",
)
SYSTEM_NETWORK_IO = Metric(
    "system_network_io_bytes_total", COUNTER, "Network traffic per interface.", H,
    ("network_interface_name", "network_io_direction"), unit="bytes",
    sources="netlink interface statistics",
)
SYSTEM_NETWORK_ERRORS = Metric(
    "system_network_errors_total", COUNTER, "Network errors per interface.", H,
    ("network_interface_name", "network_io_direction"),
    sources="netlink interface statistics",
)

# --- the exporter itself -----------------------------------------------------------------
BUILD_INFO = Metric(
    "gpu_exporter_build_info", GAUGE, "Exporter version, always 1.", S,
    ("version", "python_version", "nvml_bindings_version"),
)
COLLECTOR_SUCCESS = Metric(
    "gpu_exporter_collector_success", GAUGE,
    "1 when the collector read everything it should this scrape.", S, ("collector",),
)
COLLECTOR_DURATION = Metric(
    "gpu_exporter_collector_duration_seconds", GAUGE, "Time the collector took this scrape.",
    S, ("collector",), unit="seconds",
)
FEATURE_STATUS = Metric(
    "gpu_exporter_feature_status", GAUGE,
    "Feature state; exactly one state is 1 per feature.", S, ("feature", "state"),
)
EBPF_EVENTS_DROPPED = Metric(
    "gpu_exporter_ebpf_events_dropped_total", COUNTER,
    "eBPF events lost because a bounded map or buffer was full.", S, ("reason",),
)
EBPF_ATTACHED_LIBRARIES = Metric(
    "gpu_exporter_ebpf_attached_libraries", GAUGE,
    "CUDA library files with probes attached.", S, ("library",),
)
EBPF_KERNEL_NAMES_OVERFLOW = Metric(
    "gpu_exporter_ebpf_kernel_names_overflow_total", COUNTER,
    "Launches of kernels beyond the name cap, reported as cuda_kernel_name=\"other\".", S,
)

CATALOGUE: tuple[Metric, ...] = tuple(
    m for m in globals().values() if isinstance(m, Metric)
)
BY_NAME: dict[str, Metric] = {m.name: m for m in CATALOGUE}
