"""What the BPF program and the Python side share: map sizes, key/event layouts, enum
values, argument offsets of the CUDA ABI on x86-64, and which symbol gets which probe.

The constants here are passed to the compiler as -D definitions, so program.c and the
decoder below cannot drift apart; tests pin the CUDA-side offsets against structs laid
out as the CUDA headers declare them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

# --- map sizes ---------------------------------------------------------------------------
STATS_MAX: Final = 65536  # counters and histogram slots, all processes together
THREADS_MAX: Final = 16384  # threads inside a probed call at one time
PROCS_MAX: Final = 8192  # processes with a launch not yet covered by a synchronise
RINGBUF_PAGES: Final = 64  # 256 KiB of rare events
PROC_RINGBUF_PAGES: Final = 16  # 64 KiB of 8-byte "look at this process" events
NAME_LEN: Final = 256  # kernel names read from cuModuleGetFunction & co.

# --- key families (struct skey.fam) ------------------------------------------------------
FAM_LAUNCH: Final = 1  # sub = api, id = host function / handle / graph exec, slot 0
FAM_GRID: Final = 2
FAM_BLOCK: Final = 3
FAM_COPY: Final = 4  # sub = cudaMemcpyKind
FAM_ALLOC: Final = 5  # sub = api
FAM_SYNC: Final = 6  # sub = SYNC_*
FAM_DURATION: Final = 7  # sub = api, id = kernel
GRID_SLOTS: Final = 34  # slots 0..32 (up to 2^32 blocks), then one for anything above
BLOCK_SLOTS: Final = 12  # slots 0..10 (up to 1024 threads), then one for anything above
SLOT_SUM: Final = 100  # histogram families: the sum of values; slots 0..64 are log2 buckets

API_RUNTIME: Final = 0
API_DRIVER: Final = 1
API_GRAPH: Final = 2
API_NAMES: Final = {API_RUNTIME: "runtime", API_DRIVER: "driver", API_GRAPH: "graph"}

# enum cudaMemcpyKind
MEMCPY_HOST_TO_HOST: Final = 0
MEMCPY_HOST_TO_DEVICE: Final = 1
MEMCPY_DEVICE_TO_HOST: Final = 2
MEMCPY_DEVICE_TO_DEVICE: Final = 3
MEMCPY_DEFAULT: Final = 4
MEMCPY_KIND_MAX: Final = 4
MEMCPY_KIND_NAMES: Final = {
    MEMCPY_HOST_TO_HOST: "HostToHost",
    MEMCPY_HOST_TO_DEVICE: "HostToDevice",
    MEMCPY_DEVICE_TO_HOST: "DeviceToHost",
    MEMCPY_DEVICE_TO_DEVICE: "DeviceToDevice",
    MEMCPY_DEFAULT: "Default",
}

SYNC_CUDA_STREAM: Final = 0
SYNC_CUDA_DEVICE: Final = 1
SYNC_CUDA_EVENT: Final = 2
SYNC_CU_STREAM: Final = 3
SYNC_CU_CTX: Final = 4
SYNC_NAMES: Final = {
    SYNC_CUDA_STREAM: "cudaStreamSynchronize",
    SYNC_CUDA_DEVICE: "cudaDeviceSynchronize",
    SYNC_CUDA_EVENT: "cudaEventSynchronize",
    SYNC_CU_STREAM: "cuStreamSynchronize",
    SYNC_CU_CTX: "cuCtxSynchronize",
}

OP_LAUNCH: Final = 1
OP_COPY: Final = 2
OP_ALLOC: Final = 3
OP_SYNC: Final = 4
OP_GET_KERNEL: Final = 5
OP_GET_FUNCTION: Final = 6
OP_KERNEL_FUNCTION: Final = 7

EV_NEW_KEY: Final = 1
EV_HANDLE_NAME: Final = 2  # id = CUfunction/CUkernel, name = its (mangled) name
EV_HANDLE_ALIAS: Final = 3  # id = CUfunction, target = the CUkernel it came from
EV_KERNEL_HOST: Final = 4  # id = cudaKernel_t, target = the host function it stands for
# On the `procs` ring buffer (struct pevent: type, tgid): a process exec'd, or mapped a
# file executable (the dynamic loader loading a library, dlopen).
EV_EXEC: Final = 5
EV_MAPPED: Final = 6
PROC_EVENT = struct.Struct("<II")

DROP_STATS_FULL: Final = 0
DROP_THREADS_FULL: Final = 1
DROP_PENDING_FULL: Final = 2
DROP_EVENTS_FULL: Final = 3
DROP_BAD_ARGUMENT: Final = 4
DROP_PROC_EVENTS_FULL: Final = 5
DROP_REASONS: Final = 6
DROP_NAMES: Final = {
    DROP_STATS_FULL: "stats_map_full",
    DROP_THREADS_FULL: "threads_map_full",
    DROP_PENDING_FULL: "pending_map_full",
    DROP_EVENTS_FULL: "event_buffer_full",
    DROP_BAD_ARGUMENT: "bad_argument",
    DROP_PROC_EVENTS_FULL: "process_event_buffer_full",
}

# --- the CUDA ABI on x86-64 (System V) ---------------------------------------------------
# cudaLaunchKernel(func, dim3 grid, dim3 block, void **args, size_t shared, stream):
# func rdi, grid rsi (x | y << 32) + rdx (z), block rcx + r8, args r9, then the stack:
# shared in slot 1, stream in slot 2 (slot 0 is the return address).
RT_LAUNCH_SHARED_STACK_SLOT: Final = 1
RT_LAUNCH_STREAM_STACK_SLOT: Final = 2
# cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
# f..by in rdi..r9, then bz, shared, stream, params, extra on the stack.
CU_LAUNCH_BZ_STACK_SLOT: Final = 1
CU_LAUNCH_SHARED_STACK_SLOT: Final = 2
CU_LAUNCH_STREAM_STACK_SLOT: Final = 3
# struct cudaLaunchConfig_t { dim3 gridDim; dim3 blockDim; size_t dynamicSmemBytes;
#   cudaStream_t stream; cudaLaunchAttribute *attrs; unsigned int numAttrs; }
LCFG_GRID_OFF: Final = 0
LCFG_BLOCK_OFF: Final = 12
LCFG_SMEM_OFF: Final = 24
LCFG_STREAM_OFF: Final = 32
# struct CUlaunchConfig { unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
#   blockDimZ, sharedMemBytes; CUstream hStream; CUlaunchAttribute *attrs; unsigned numAttrs; }
CULCFG_GRID_OFF: Final = 0
CULCFG_BLOCK_OFF: Final = 12
CULCFG_SMEM_OFF: Final = 24
CULCFG_STREAM_OFF: Final = 32


def defines() -> list[str]:
    """Compiler flags giving program.c every integer constant of this module."""
    return [
        f"-D{name}={value}" for name, value in sorted(globals().items())
        if name.isupper() and isinstance(value, int) and not isinstance(value, bool)
    ]


# --- the ring buffer event layout (map keys come back as bcc ctypes structs) --------------
EVENT_HEAD = struct.Struct("<IIHHIQQ16s")  # type, tgid, fam, sub, pad, id, target, comm


@dataclass(frozen=True)
class Probe:
    symbol: str
    program: str  # the BPF function run on entry
    returns: str | None = None  # the BPF function run on return, if any


def _rt(symbol: str, program: str) -> Probe:
    # Every runtime probe has a return probe: it ends the thread's "inside a runtime
    # call" marker, so that the driver calls the runtime makes are not counted twice.
    return Probe(symbol, program, "rt_ret")


RUNTIME_PROBES: Final[tuple[Probe, ...]] = (
    _rt("cudaLaunchKernel", "rt_launch"),
    _rt("cudaLaunchKernel_ptsz", "rt_launch"),
    _rt("cudaLaunchCooperativeKernel", "rt_launch"),
    _rt("cudaLaunchCooperativeKernel_ptsz", "rt_launch"),
    _rt("cudaLaunchKernelExC", "rt_launch_exc"),
    _rt("cudaLaunchKernelExC_ptsz", "rt_launch_exc"),
    _rt("cudaGraphLaunch", "rt_graph"),
    _rt("cudaGraphLaunch_ptsz", "rt_graph"),
    _rt("__cudaGetKernel", "rt_get_kernel"),
    _rt("cudaMalloc", "rt_malloc"),
    _rt("cudaMallocAsync", "rt_malloc"),
    _rt("cudaMallocAsync_ptsz", "rt_malloc"),
    _rt("cudaMallocManaged", "rt_malloc"),
    _rt("cudaMemcpy", "rt_memcpy"),
    _rt("cudaMemcpy_ptds", "rt_memcpy"),
    _rt("cudaMemcpyAsync", "rt_memcpy"),
    _rt("cudaMemcpyAsync_ptsz", "rt_memcpy"),
    _rt("cudaStreamSynchronize", "rt_sync_stream"),
    _rt("cudaStreamSynchronize_ptsz", "rt_sync_stream"),
    _rt("cudaDeviceSynchronize", "rt_sync_device"),
    _rt("cudaEventSynchronize", "rt_sync_event"),
)

DRIVER_PROBES: Final[tuple[Probe, ...]] = (
    Probe("cuLaunchKernel", "drv_launch"),
    Probe("cuLaunchKernel_ptsz", "drv_launch"),
    Probe("cuLaunchKernelEx", "drv_launch_ex"),
    Probe("cuLaunchKernelEx_ptsz", "drv_launch_ex"),
    Probe("cuMemcpy", "drv_copy_default"),
    Probe("cuMemcpyAsync", "drv_copy_default"),
    Probe("cuMemcpyAsync_ptsz", "drv_copy_default"),
    Probe("cuMemcpyHtoD_v2", "drv_copy_htod"),
    Probe("cuMemcpyHtoDAsync_v2", "drv_copy_htod"),
    Probe("cuMemcpyHtoDAsync_v2_ptsz", "drv_copy_htod"),
    Probe("cuMemcpyDtoH_v2", "drv_copy_dtoh"),
    Probe("cuMemcpyDtoHAsync_v2", "drv_copy_dtoh"),
    Probe("cuMemcpyDtoHAsync_v2_ptsz", "drv_copy_dtoh"),
    Probe("cuMemcpyDtoD_v2", "drv_copy_dtod"),
    Probe("cuMemcpyDtoDAsync_v2", "drv_copy_dtod"),
    Probe("cuMemcpyDtoDAsync_v2_ptsz", "drv_copy_dtod"),
    Probe("cuMemAlloc_v2", "drv_alloc", "drv_ret"),
    Probe("cuStreamSynchronize", "drv_sync_stream", "drv_ret"),
    Probe("cuStreamSynchronize_ptsz", "drv_sync_stream", "drv_ret"),
    Probe("cuCtxSynchronize", "drv_sync_ctx", "drv_ret"),
    Probe("cuModuleGetFunction", "drv_get_function", "drv_ret"),
    Probe("cuLibraryGetKernel", "drv_get_function", "drv_ret"),
    Probe("cuKernelGetFunction", "drv_kernel_function", "drv_ret"),
)

ALL_PROBES: Final = RUNTIME_PROBES + DRIVER_PROBES
BY_SYMBOL: Final = {p.symbol: p for p in ALL_PROBES}
# A mapped file that defines one of these is probed whatever its name (a runtime linked
# statically into a binary, a wheel's hashed libcudart-1a2b3c4d.so.12).
MARKER_SYMBOLS: Final = frozenset({"cudaLaunchKernel", "cuLaunchKernel"})
