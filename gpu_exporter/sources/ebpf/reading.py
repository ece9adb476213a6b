"""What one read of the eBPF maps returns: typed, in base units (bytes, seconds), with
histograms already as Prometheus cumulative buckets. No prometheus_client here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from gpu_exporter.model.ebpf_abi import Completion, CudaApi, MemoryType

# Fixed bucket bounds. The BPF side keeps log2 slots (slot s holds values in
# (2^(s-1), 2^s]); every bound below is a power of two, so the cumulative counts are exact.
BYTES_BOUNDS_LOG2: tuple[int, ...] = tuple(range(0, 35, 2))  # 1 B .. 16 GiB, x4
GRID_BOUNDS_LOG2: tuple[int, ...] = tuple(range(0, 33, 2))  # 1 .. 2^32 blocks, x4
BLOCK_BOUNDS_LOG2: tuple[int, ...] = tuple(range(0, 11))  # 1 .. 1024 threads, x2
SECONDS_BOUNDS_LOG2_NS: tuple[int, ...] = tuple(range(10, 35, 2))  # ~1 µs .. ~17 s, x4


@dataclass(frozen=True)
class Histogram:
    buckets: tuple[tuple[float, float], ...]  # (upper bound, cumulative count), +Inf last
    sum: float  # in the family's base unit

    @property
    def count(self) -> float:
        return self.buckets[-1][1]


def cumulative(
    slots: Mapping[int, int], total: float, bounds_log2: Sequence[int], scale: float = 1.0
) -> Histogram:
    """log2 slots -> cumulative buckets at 2^b * scale for b in bounds_log2, then +Inf."""
    out: list[tuple[float, float]] = []
    for b in bounds_log2:
        out.append((float(2**b) * scale, float(sum(n for s, n in slots.items() if s <= b))))
    out.append((float("inf"), float(sum(slots.values()))))
    return Histogram(tuple(out), total * scale)


@dataclass(frozen=True)
class NvmlView:
    """What NVML lists this scrape: the devices each process has a context on (GPU or
    MIG UUIDs), whether every device's list was read whole, and the GPUs' keys by PCI
    address. The eBPF engine judges the device of each call by it."""

    devices_of: Mapping[int, frozenset[str]]  # pid -> device keys
    complete: bool
    by_pci: Mapping[str, str]  # PCI address (0000:3b:00.0) -> device key


@dataclass(frozen=True)
class Launches:
    kernel_name: str
    executable: str
    api: CudaApi  # runtime | driver | graph | hip | hip_module | hip_graph
    pid: int | None  # only with --ebpf.pid-label
    count: int
    device: str | None = None  # the device's key, when certain


class CallKey(NamedTuple):
    """What counts of CUDA calls are kept by; a field the family does not use is ""."""

    executable: str = ""
    kernel_name: str = ""
    api: CudaApi = "runtime"  # launches, allocations (CUDA's or HIP's: abi.API_NAMES)
    memcpy_kind: str = ""  # copies
    memory_type: MemoryType = "device"  # allocations
    sync_call: str = ""  # synchronisations
    call: str = ""  # errors: the entry point, as documented (cudaMemcpyAsync)
    error_type: str = ""  # errors: the code's name (cudaErrorNoDevice), or its number
    pid: int | None = None  # only with --ebpf.pid-label
    device: str | None = None  # the device's key (GPU or MIG UUID), when certain
    # kernel durations: what bounded the kernel's completion (docs/ebpf.md)
    completion: Completion | Literal[""] = ""


def order(key: CallKey) -> tuple[tuple[int, str | int], ...]:
    """A total order on CallKeys, for reporting them in a stable order: a field that may
    be None (`pid` without --ebpf.pid-label, `device` before NVML lists the process)
    sorts before every value, so keys that differ only in what is known still compare."""
    return tuple((0, "") if v is None else (1, v) for v in key)


@dataclass(frozen=True)
class CallHistogram:
    key: CallKey
    histogram: Histogram


@dataclass(frozen=True)
class CallCount:
    key: CallKey
    count: int


@dataclass(frozen=True)
class CudaActivity:
    launches: Sequence[Launches]
    grid_size: Sequence[CallHistogram]  # blocks per grid
    block_size: Sequence[CallHistogram]  # threads per block
    kernel_duration_seconds: Sequence[CallHistogram]
    copies_bytes: Sequence[CallHistogram]
    allocations_bytes: Sequence[CallHistogram]
    sync_duration_seconds: Sequence[CallHistogram]
    errors: Sequence[CallCount]  # calls that returned an error, not counted above
    dropped: Mapping[str, int]  # reason -> events lost since start
    attached_libraries: Sequence[str]  # paths as the first process seen mapping them saw
    kernel_names_overflow: int  # launches reported as cuda_kernel_name="other"
    # processes whose executable was past the cap, reported as process_executable_name=
    # "other" (each counted once)
    executables_folded: int = 0
    # (issue #27) successful cudaStreamWaitEvent calls; the bound on the time each held
    # its stream, where the awaited event's completion was seen
    stream_waits: Sequence[CallCount] = ()
    stream_wait_bound_seconds: Sequence[CallHistogram] = ()
    # cudaEventElapsedTime of spans holding one launch: that kernel's exact time
    kernel_elapsed_seconds: Sequence[CallHistogram] = ()
