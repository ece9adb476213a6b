"""What the BPF program and the Python side share: map sizes, key/event layouts, enum
values, argument offsets of the CUDA ABI on x86-64, and which symbol gets which probe.

The constants here are passed to the compiler as -D definitions, so program.c and the
decoder below cannot drift apart; tests pin the CUDA-side offsets against structs laid
out as the CUDA headers declare them.
"""

from __future__ import annotations

import re
import struct
from bisect import bisect_left
from dataclasses import dataclass, replace
from typing import Final, Literal

# --- map sizes ---------------------------------------------------------------------------
STATS_MAX: Final = 65536  # counters and histogram slots, all processes together
THREADS_MAX: Final = 16384  # threads inside a probed call at one time
FAST_THREADS_BITS: Final = 13  # 2**13 threads' state found by index (the others: task storage)
FAST_THREADS: Final = 1 << FAST_THREADS_BITS
PROCS_MAX: Final = 8192  # processes that launched (shapes) / await a synchronise (pending)
LAUNCH_SLOTS: Final = 16  # launch counters kept in a process's shape value
# 4 MiB of rare events: names (56 bytes a record, 312 with a kernel's name), graph events
# (40 bytes). Sized to hold a burst of graph building whole while the event loop is busy
# or starved of CPU (docs/performance.md: the rates it holds).
RINGBUF_PAGES: Final = 1024
PROC_RINGBUF_PAGES: Final = 16  # 64 KiB of 8-byte "look at this process" events
NAME_LEN: Final = 256  # kernel names read from cuModuleGetFunction & co.
# CUDA graphs: streams under capture (and streams joined to a capture), capture events,
# executable graphs.
CAPTURES_MAX: Final = 1024
EXECS_MAX: Final = 16384
GRAPH_NODES_MAX: Final = 65536  # kernel nodes kept per process (user space)
GRAPHS_MAX: Final = 4096  # graphs, captures and executable graphs kept per process
GRAPH_SERIAL_BIT: Final = 1 << 47  # a graph launch key's id: an executable graph's serial

# --- completion points (issue #27): kernel durations bounded per stream ------------------
STREAMS_MAX: Final = 8192  # streams with launches awaiting a completion, all processes
# ... of one process at once (a power of 2). A device synchronise closes each stream's
# groups in (SEALED + 1) tail calls: (SEALED + 1) * PROC_STREAMS <= 32, the kernel's limit.
PROC_STREAMS: Final = 8
SEALED: Final = 3  # groups sealed by a record and not yet known complete, per stream
CUDA_EVENTS_MAX: Final = 65536  # recorded CUDA events, all processes
GROUP_KERNELS: Final = 4  # distinct kernels kept by name in a group; more: "other"
# A probe's cookie (program.c, COOKIE_*): bits 0-15 the probe's index, 16-23 its arg, 24
# the driver side, 25-29 an argument position, 30 a HIP entry point (issue #23), 31 a
# _ptsz entry point (per-thread stream, issue #27).
COOKIE_HIP_SHIFT: Final = 30
COOKIE_PTSZ_SHIFT: Final = 31
# A kernel duration's sub: api | completion << 8
COMPLETION_SYNC_FALLBACK: Final = 0
COMPLETION_EVENT: Final = 1
Completion = Literal["event", "sync_fallback"]
COMPLETION_NAMES: Final[dict[int, Completion]] = {
    COMPLETION_SYNC_FALLBACK: "sync_fallback", COMPLETION_EVENT: "event"}
DURATION_OTHER_ID: Final = (1 << 48) - 1  # launches beyond a group's GROUP_KERNELS kernels
CUDA_NOT_READY: Final = 600  # cudaErrorNotReady and CUDA_ERROR_NOT_READY: an answer
STREAM_LEGACY: Final = 1  # cudaStreamLegacy / CU_STREAM_LEGACY
STREAM_PER_THREAD: Final = 2  # cudaStreamPerThread / CU_STREAM_PER_THREAD
PER_THREAD_KEY: Final = 1 << 62  # a stream key: the default stream of thread (low bits)

# --- key families (struct skey.fam) ------------------------------------------------------
FAM_LAUNCH: Final = 1  # sub = api, id = host function / handle / graph exec, slot 0
FAM_GRID: Final = 2
FAM_BLOCK: Final = 3
FAM_COPY: Final = 4  # sub = cudaMemcpyKind
FAM_ALLOC: Final = 5  # sub = api
FAM_SYNC: Final = 6  # sub = SYNC_*
FAM_DURATION: Final = 7  # sub = api, id = kernel
FAM_ERROR: Final = 8  # sub = the call (its probe's index), id = the error code
FAM_WAIT: Final = 9  # (issue #27) stream waits, counted in slot 0
FAM_WAIT_BOUND: Final = 10  # their bounds: a histogram of ns
FAM_ELAPSED: Final = 11  # sub = api, id = kernel: cudaEventElapsedTime of one-launch spans
GRID_SLOTS: Final = 34  # slots 0..32 (up to 2^32 blocks), then one for anything above
BLOCK_SLOTS: Final = 12  # slots 0..10 (up to 1024 threads), then one for anything above
SLOT_SUM: Final = 100  # histogram families: the sum of values; slots 0..64 are log2 buckets

API_RUNTIME: Final = 0
API_DRIVER: Final = 1
API_GRAPH: Final = 2
# HIP (AMD's libamdhip64): a HIP probe's cookie has COOKIE_HIP; its api is the CUDA one's
# + API_HIP (hipLaunchKernel: hip, hipModuleLaunchKernel: hip_module, hipGraphLaunch:
# hip_graph). The label keeps its name (cuda_api): the same queries find both.
API_HIP: Final = 3
API_HIP_MODULE: Final = 4
API_HIP_GRAPH: Final = 5
CudaApi = Literal["runtime", "driver", "graph", "hip", "hip_module", "hip_graph"]  # cuda_api
API_NAMES: Final[dict[int, CudaApi]] = {
    API_RUNTIME: "runtime", API_DRIVER: "driver", API_GRAPH: "graph", API_HIP: "hip",
    API_HIP_MODULE: "hip_module", API_HIP_GRAPH: "hip_graph"}
GRAPH_APIS: Final = frozenset({API_GRAPH, API_HIP_GRAPH})

# enum cudaMemcpyKind
MEMCPY_HOST_TO_HOST: Final = 0
MEMCPY_HOST_TO_DEVICE: Final = 1
MEMCPY_DEVICE_TO_HOST: Final = 2
MEMCPY_DEVICE_TO_DEVICE: Final = 3
MEMCPY_DEFAULT: Final = 4
MEMCPY_KIND_MAX: Final = 4
MEMCPY_FROM_ARGS: Final = 0xFF  # in a copy probe's cookie: the kind is an argument
# cuda_memcpy_kind: the enumerators' names (cudaMemcpyHostToHost, ...), in value order.
MEMCPY_KIND_NAMES: Final = dict(enumerate(
    ("HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice", "Default")))

# A synchronising probe's call (its name, cuda_sync_call: SYNC_NAMES, from the probes).
SYNC_CUDA_STREAM: Final = 0
SYNC_CUDA_DEVICE: Final = 1
SYNC_CUDA_EVENT: Final = 2
SYNC_CU_STREAM: Final = 3
SYNC_CU_CTX: Final = 4
SYNC_CU_EVENT: Final = 5
SYNC_HIP_STREAM: Final = 6
SYNC_HIP_DEVICE: Final = 7
SYNC_HIP_EVENT: Final = 8

# What an allocation allocates (the memory type, in an allocation probe's cookie).
MEM_DEVICE: Final = 0
MEM_MANAGED: Final = 1
MEM_HOST: Final = 2
MemoryType = Literal["device", "managed", "host"]  # cuda_memory_type
MEM_NAMES: Final[dict[int, MemoryType]] = {
    MEM_DEVICE: "device", MEM_MANAGED: "managed", MEM_HOST: "host"}

# The device a call was made on (struct skey.dev): the calling thread's current device
# ordinal + 1, or this when it never chose one.
DEV_NONE: Final = 0
DEV_UNKNOWN: Final = 0xFF  # a context the probes did not see made
DEV_ORDINAL_MAX: Final = 0xFD  # ordinals above are kept as unknown
CONTEXTS_MAX: Final = 4096  # CUDA contexts whose device is known (per process and handle)
CTX_STACK: Final = 4  # pushed contexts remembered per thread
CTX_DEV_PARAM_RETAIN: Final = 2  # cuDevicePrimaryCtxRetain's device: the 2nd parameter
CTX_DEV_PARAM_V4: Final = 4  # cuCtxCreate_v4's (CUDA 12.5; CUDA 13's cuCtxCreate): the 4th

OP_LAUNCH: Final = 1
OP_COPY: Final = 2
OP_ALLOC: Final = 3
OP_SYNC: Final = 4
OP_GET_KERNEL: Final = 5
OP_GET_FUNCTION: Final = 6
OP_KERNEL_FUNCTION: Final = 7
OP_GRAPH_LAUNCH: Final = 8
OP_SET_DEVICE: Final = 9  # cudaSetDevice
OP_CTX_SET: Final = 10  # cuCtxSetCurrent / cuCtxPushCurrent (arg 1: a push)
OP_CTX_POP: Final = 11
OP_CTX_MADE: Final = 12  # cuDevicePrimaryCtxRetain / cuCtxCreate (arg 1: made current)
OP_DEVICE_UUID: Final = 13  # the UUID of a device ordinal, as the process asked for it
OP_DEVICE_PCI: Final = 14  # its PCI bus id
# A copy whose size in bytes is not known (see DROP_COPY_SIZE_UNKNOWN); numbered apart
# from the ops above so that others can be added there.
OP_COPY_UNSIZED: Final = 32
OP_CAPTURE_BEGIN: Final = 15  # cudaStreamBeginCapture (arg 1: ...ToGraph)
OP_CAPTURE_END: Final = 16
OP_EVENT_RECORD: Final = 17
OP_STREAM_WAIT: Final = 18  # cudaStreamWaitEvent: a stream may join a capture
OP_GRAPH_CREATE: Final = 19
OP_GRAPH_ADD_KERNEL: Final = 20  # a node added to a graph (arg: GRAPH_ADD_*)
OP_GRAPH_INSTANTIATE: Final = 21
OP_GRAPH_CLONE: Final = 22
OP_GRAPH_UPDATE: Final = 23  # cudaGraphExecUpdate: the executable graph runs another graph
OP_GRAPH_DESTROY: Final = 24
OP_GRAPH_EXEC_DESTROY: Final = 25
OP_EVENT_QUERY: Final = 26  # (issue #27) cudaEventQuery / cuEventQuery
OP_STREAM_QUERY: Final = 27
OP_EVENT_DESTROY: Final = 28
OP_EVENT_ELAPSED: Final = 29  # cudaEventElapsedTime(float *ms, start, end)
OP_STREAM_DESTROY: Final = 30  # cudaStreamDestroy / cuStreamDestroy_v2: its state retired

EV_NEW_KEY: Final = 1
EV_HANDLE_NAME: Final = 2  # id = CUfunction/CUkernel, name = its (mangled) name
EV_HANDLE_ALIAS: Final = 3  # id = CUfunction, target = the CUkernel it came from
EV_KERNEL_HOST: Final = 4  # id = cudaKernel_t, target = the host function it stands for
EV_DEVICE_UUID: Final = 7  # id = a device ordinal of the process, name = its 16-byte UUID
EV_DEVICE_PCI: Final = 8  # id = a device ordinal of the process, name = its PCI bus id
# On the `procs` ring buffer (struct pevent: type, tgid): a process exec'd, or mapped a
# file executable (the dynamic loader loading a library, dlopen).
EV_EXEC: Final = 5
EV_MAPPED: Final = 6
PROC_EVENT = struct.Struct("<II")
# On the `events` ring buffer too (struct ehead alone: type, tgid, api, pad, id, target).
EV_GRAPH_CREATE: Final = 20  # id = a graph, new and empty
EV_GRAPH_NODE: Final = 21  # id = a kernel (api: its key's), target = the graph it was added to
EV_CAPTURE_BEGIN: Final = 22  # id = a capture, target = the graph it adds to (ToGraph) or 0
EV_CAPTURED_NODE: Final = 23  # id = a kernel launched into capture `target` (api)
EV_CAPTURE_END: Final = 24  # id = a capture, target = the graph it made (0: it failed)
# id = an executable graph's serial (given at instantiation and at each update), target =
# the graph whose kernel nodes it runs
EV_GRAPH_EXEC: Final = 25
EV_GRAPH_CLONE: Final = 26  # id = a new graph, target = the graph it is a copy of
EV_GRAPH_CHILD: Final = 27  # id = a graph added as a child node to graph `target`
EV_GRAPH_DESTROY: Final = 28  # id = a graph destroyed
# id = an executable graph's serial that no launch counts by any more (the executable
# graph updated, instantiated again into the same handle, or destroyed): its counters are
# final once this is read
EV_GRAPH_RETIRED: Final = 29
# (issue #27) A group of launches closed by a completion point (struct durations_event):
# fam = completion, pad = device, id = the bound in ns; then GROUP_KERNELS launch tags
# (kernel id | (api + 1) << 48), their counts, and the count of further kernels' launches.
EV_DURATIONS: Final = 30
# A stream wait (struct ehead alone): fam 0 = a successful cudaStreamWaitEvent, fam 1 =
# the bound on the time one held its stream (id, ns), once the awaited event's completion
# is seen; pad = the device. Counted in user space (FAM_WAIT, FAM_WAIT_BOUND).
EV_WAIT: Final = 31
# cudaEventElapsedTime of a span that holds one launch (struct ehead): fam = api, sub = 0,
# pad = the device, id = the kernel, target = the float milliseconds' bits. Counted in
# user space (FAM_ELAPSED, a histogram of ns by kernel).
EV_ELAPSED: Final = 32
GRAPH_EVENT = struct.Struct("<IIHHIQQ")
GRAPH_EVENTS: Final = frozenset({EV_GRAPH_CREATE, EV_GRAPH_NODE, EV_CAPTURE_BEGIN,
                                 EV_CAPTURED_NODE, EV_CAPTURE_END, EV_GRAPH_EXEC,
                                 EV_GRAPH_CLONE, EV_GRAPH_CHILD, EV_GRAPH_DESTROY,
                                 EV_GRAPH_RETIRED})

DROP_STATS_FULL: Final = 0
DROP_THREADS_FULL: Final = 1
DROP_PENDING_FULL: Final = 2
DROP_EVENTS_FULL: Final = 3
DROP_BAD_ARGUMENT: Final = 4
DROP_PROC_EVENTS_FULL: Final = 5
DROP_COPY_SIZE_UNKNOWN: Final = 6
DROP_GRAPHS_FULL: Final = 7  # a capture, capture event or executable graph not kept
DROP_GRAPH_EVENTS_FULL: Final = 8
DROP_CALL_UNFINISHED: Final = 9  # a thread exited inside a probed call (killed mid-call)
DROP_EVENT_MAP_FULL: Final = 10  # a recorded CUDA event not kept (issue #27)
DROP_REASONS: Final = 11
DROP_NAMES: Final = {
    DROP_STATS_FULL: "stats_map_full",
    DROP_THREADS_FULL: "threads_map_full",
    DROP_PENDING_FULL: "pending_map_full",
    DROP_EVENTS_FULL: "event_buffer_full",
    DROP_BAD_ARGUMENT: "bad_argument",
    DROP_PROC_EVENTS_FULL: "process_event_buffer_full",
    # A runtime 3D copy with a CUDA array on one side: its extent is in array elements,
    # whose size is inside the opaque array, so its bytes are not known.
    DROP_COPY_SIZE_UNKNOWN: "copy_size_unknown",
    DROP_GRAPHS_FULL: "graph_map_full",
    DROP_GRAPH_EVENTS_FULL: "graph_event_buffer_full",
    # A probed call whose thread exited before it returned (a process killed or exiting
    # mid-launch): neither work nor an error, it is counted here.
    DROP_CALL_UNFINISHED: "call_unfinished",
    DROP_EVENT_MAP_FULL: "cuda_event_map_full",
}
# Counted in user space: kernel nodes or graphs beyond GRAPH_NODES_MAX / GRAPHS_MAX.
DROP_GRAPH_NODES: Final = "graph_nodes_full"
# Counted in user space: kernel names longer than names.NAME_LABEL_MAX (reported as other).
DROP_NAME_TOO_LONG: Final = "kernel_name_too_long"

# --- the CUDA ABI on x86-64 (System V) ---------------------------------------------------
# (the only CPU the collector runs on: arch.py)
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
# struct cudaDeviceProp { char name[256]; cudaUUID_t uuid; ... }
DEVICE_PROP_UUID_OFF: Final = 256
# The 2D runtime copies take (..., size_t width, size_t height, enum cudaMemcpyKind kind
# [, stream]): width is their 5th argument (cudaMemcpy2D, dst/dpitch/src/spitch first),
# 6th (cudaMemcpy2DToArray, cudaMemcpy2DFromArray: an array and two offsets on one side)
# or 7th (cudaMemcpy2DArrayToArray); height and kind follow it. A probe's `pos`.
RT_2D_WIDTH_ARG: Final = 5
RT_2D_ARRAY_WIDTH_ARG: Final = 6
RT_2D_ARRAY_TO_ARRAY_WIDTH_ARG: Final = 7
# struct cudaMemcpy3DParms { cudaArray_t srcArray; struct cudaPos srcPos;
#   struct cudaPitchedPtr srcPtr; cudaArray_t dstArray; struct cudaPos dstPos;
#   struct cudaPitchedPtr dstPtr; struct cudaExtent extent; enum cudaMemcpyKind kind; }
# and struct cudaMemcpy3DPeerParms (an int device after each cudaPitchedPtr, no kind);
# cudaExtent is { size_t width, height, depth }. A probe's `pos` says which (RT_3D_*).
RT_3D: Final = 0
RT_3D_PEER: Final = 1
RT3D_SRC_ARRAY_OFF: Final = 0
RT3D_DST_ARRAY_OFF: Final = 64
RT3D_EXTENT_OFF: Final = 128
RT3D_KIND_OFF: Final = 152
RT3D_SIZE: Final = 160
RT3DPEER_DST_ARRAY_OFF: Final = 72
RT3DPEER_EXTENT_OFF: Final = 144
RT3DPEER_SIZE: Final = 168
# CUDA_MEMCPY2D (v2): size_t srcXInBytes, srcY; CUmemorytype srcMemoryType; srcHost,
# srcDevice, srcArray, srcPitch; the same five for dst; size_t WidthInBytes, Height.
CU2D_SRC_TYPE_OFF: Final = 16
CU2D_DST_TYPE_OFF: Final = 72
CU2D_WIDTH_OFF: Final = 112
CU2D_SIZE: Final = 128
# CUDA_MEMCPY3D (v2) and CUDA_MEMCPY3D_PEER share these offsets (the peer struct has
# contexts where the plain one has reserved pointers): ... WidthInBytes, Height, Depth.
CU3D_SRC_TYPE_OFF: Final = 32
CU3D_DST_TYPE_OFF: Final = 120
CU3D_WIDTH_OFF: Final = 176
CU3D_SIZE: Final = 200
# enum CUmemorytype
CU_MEMORYTYPE_HOST: Final = 1
CU_MEMORYTYPE_DEVICE: Final = 2
CU_MEMORYTYPE_ARRAY: Final = 3
CU_MEMORYTYPE_UNIFIED: Final = 4
# struct cudaKernelNodeParams { void *func; ... }, CUDA_KERNEL_NODE_PARAMS(_v2) { CUfunction
# func; ... }; cudaGraphNodeParams / CUgraphNodeParams { int type; int reserved0[3];
# union { ... kernel node params, struct cudaChildGraphNodeParams { cudaGraph_t graph; }
# / CUDA_CHILD_GRAPH_NODE_PARAMS ... } }: type 0 is a kernel node, 4 a child graph.
KNODE_FUNC_OFF: Final = 0
# CUDA_KERNEL_NODE_PARAMS_v2/_v3 (CUDA 12.0; cuGraphAddKernelNode_v2's, a driver
# CUgraphNodeParams' kernel) { ...; void **extra; CUkernel kern; CUcontext ctx; }: the
# kernel, used when func is NULL (a kernel of a library loaded by cuLibraryLoad*).
KNODE_KERN_OFF: Final = 56
NODE_PARAMS_KERNEL_OFF: Final = 16
CHILD_GRAPH_OFF: Final = 0  # in the union, as NODE_PARAMS_KERNEL_OFF
GRAPH_NODE_KERNEL: Final = 0
GRAPH_NODE_GRAPH: Final = 4
# What a graph_add_kernel probe's call adds (its arg): its last argument points at a
# kernel node's parameters (cudaGraphAddKernelNode), at a node's parameters of any type
# (cudaGraphAddNode: its kernel nodes and child graphs are followed), or is a child graph
# (cudaGraphAddChildGraphNode).
GRAPH_ADD_KERNEL_PARAMS: Final = 0
GRAPH_ADD_NODE_PARAMS: Final = 1
GRAPH_ADD_CHILD: Final = 2
# cudaGraphAddNode_v2 / cuGraphAddNode_v2 (CUDA 12.3) take the edge data before
# numDependencies: the parameters are the 6th argument (a probe's `pos`), not the 5th.
GRAPH_ADD_NODE_V2_PARAMS_ARG: Final = 6
# vm.mmap_min_addr's usual value: no user address below it is mapped, so an argument
# below it is a count, not a pointer (cudaGraphAddNode of CUDA 13: see program.c).
USER_ADDR_MIN: Final = 65536


# --- log2 histogram slots ----------------------------------------------------------------
# Slot s holds the values in (2^(s-1), 2^s] (slot 0: 0 and 1), so a histogram's "le"
# bounds are powers of two. These bounds are the one definition of a value's slot for
# both sides: `slot_of` here (samples derived in Python, sources/ebpf/durations.py) and
# program.c's SLOT_OF, a binary search over the same bounds written out by `_slot_search`
# and passed with the constants (the BPF instruction set has no count-leading-zeros).
SLOT_BOUNDS: Final = tuple(1 << s for s in range(64))  # slot 64: above 2^63


def slot_of(v: int) -> int:
    """The slot of `v` (0 <= v < 2^64): the smallest s with v <= 2^s."""
    return bisect_left(SLOT_BOUNDS, v)


def _slot_search(lo: int, hi: int) -> str:
    """C for the slot of `v` known to be in lo..hi: the same bisection as `slot_of`."""
    if lo == hi:
        return f"{lo}"
    mid = (lo + hi) // 2
    return f"((v) <= {SLOT_BOUNDS[mid]}ULL ? {_slot_search(lo, mid)} : {_slot_search(mid + 1, hi)})"


def defines() -> list[str]:
    """Compiler flags giving program.c every integer constant of this module, and
    SLOT_OF(v)."""
    return [
        f"-D{name}={value}" for name, value in sorted(globals().items())
        if name.isupper() and isinstance(value, int) and not isinstance(value, bool)
    ] + [f"-DSLOT_OF(v)={_slot_search(0, len(SLOT_BOUNDS))}"]


# --- the ring buffer event layout (map keys come back as bcc ctypes structs) --------------
EVENT_HEAD = struct.Struct("<IIHHIQQ16s")  # type, tgid, fam, sub, pad, id, target, comm


_SUFFIX = re.compile(r"(_v\d)?(_pt[sd][sz])?$")
_HIP_SUFFIX = re.compile(r"_spt$")
_MANGLED = re.compile(r"^_Z(\d+)(\w+)")


@dataclass(frozen=True)
class Probe:
    """One probed entry point: an entry program (`program`) and the one return program,
    told apart by the probe's cookie: its index in ALL_PROBES, a constant of the call
    (`arg`), and whether it is a driver call."""

    symbol: str
    program: str
    arg: int = 0
    driver: bool = False
    # The CUDA release that added it, when newer than the real libraries recorded in
    # tests/fixtures/cuda/real-symbols.txt (runtime 11.8, driver 535 / CUDA 12.2).
    since: str = ""
    # Where the program finds its arguments, for programs shared by calls of several
    # layouts (copy_2d: the argument number of the width; copy_3d: RT_3D / RT_3D_PEER).
    pos: int = 0
    # A HIP entry point (libamdhip64): its api is hip / hip_module / hip_graph, its errors
    # hipError_t. `since`: then the ROCm release that added it, when newer than the real
    # library recorded in tests/fixtures/hip/ (Debian's ROCm 5.2.3).
    hip: bool = False

    @property
    def call(self) -> str:
        """The documented name (cuda_call): `cuMemcpyHtoDAsync_v2_ptsz` is
        `cuMemcpyHtoDAsync`, as the CUDA headers' macros name it; `hipMemcpy_spt` is
        `hipMemcpy`; a C++ symbol (`_Z24hipExtModuleLaunchKernel...`) its function's name."""
        mangled = _MANGLED.match(self.symbol)
        if mangled:
            return mangled.group(2)[:int(mangled.group(1))]
        return _HIP_SUFFIX.sub("", self.symbol) if self.hip else _SUFFIX.sub("", self.symbol)


RETURN_PROGRAM: Final = "on_return"  # on every runtime entry point
RETURN_PROGRAM_DRIVER: Final = "on_return_drv"  # on every driver entry point


def return_program(p: Probe) -> str:
    return RETURN_PROGRAM_DRIVER if p.driver else RETURN_PROGRAM


def _variants(symbol: str, program: str, arg: int = 0, driver: bool = False,
              suffixes: tuple[str, ...] = ("",)) -> tuple[Probe, ...]:
    return tuple(Probe(symbol + s, program, arg, driver) for s in suffixes)


def _rt(symbol: str, program: str, arg: int = 0, *suffixes: str) -> tuple[Probe, ...]:
    return _variants(symbol, program, arg, False, ("", *suffixes))


def _drv(symbol: str, program: str, arg: int = 0, *suffixes: str) -> tuple[Probe, ...]:
    return _variants(symbol, program, arg, True, ("", *suffixes))


def _at(pos: int, probes: tuple[Probe, ...]) -> tuple[Probe, ...]:
    return tuple(replace(p, pos=pos) for p in probes)


# _ptsz / _ptds: the same call with the per-thread default stream (nvcc
# --default-stream per-thread), exported by the runtime and the driver.
PTSZ, PTDS = "_ptsz", "_ptds"


def _per_thread_launches(probes: tuple[Probe, ...]) -> tuple[Probe, ...]:
    """The _ptsz launches get programs of their own (rt_launch_ptsz, drv_launch_ptsz): a
    launch does not read its probe's cookie (costly), so the program itself says that a
    NULL stream is the calling thread's default stream, not the legacy one."""
    return tuple(replace(p, program=p.program + PTSZ)
                 if p.symbol.endswith(PTSZ) and p.program in ("rt_launch", "drv_launch")
                 else p for p in probes)


RUNTIME_PROBES: Final[tuple[Probe, ...]] = _per_thread_launches((
    *_rt("cudaLaunchKernel", "rt_launch", 0, PTSZ),
    *_rt("cudaLaunchCooperativeKernel", "rt_launch", 0, PTSZ),
    *_rt("cudaLaunchKernelExC", "launch_ex", 0, PTSZ),
    *_rt("cudaGraphLaunch", "graph_launch", 0, PTSZ),
    Probe("__cudaGetKernel", "rt_get_kernel", since="12.0"),
    *_rt("cudaMalloc", "alloc", MEM_DEVICE),
    *_rt("cudaMallocAsync", "alloc", MEM_DEVICE, PTSZ),
    *_rt("cudaMallocManaged", "alloc", MEM_MANAGED),
    *_rt("cudaMemcpy", "copy", MEMCPY_FROM_ARGS, PTDS),
    *_rt("cudaMemcpyAsync", "copy", MEMCPY_FROM_ARGS, PTSZ),
    *_rt("cudaSetDevice", "set_device"),
    *_rt("cudaGetDeviceProperties", "device_uuid", 1),
    Probe("cudaGetDeviceProperties_v2", "device_uuid", 1, since="12.0"),
    *_rt("cudaDeviceGetPCIBusId", "device_pci"),
    *_rt("cudaStreamBeginCapture", "capture_begin", 0, PTSZ),
    Probe("cudaStreamBeginCaptureToGraph", "capture_begin", 1, since="12.3"),
    Probe("cudaStreamBeginCaptureToGraph_ptsz", "capture_begin", 1, since="12.3"),
    # CUDA 13.3: a capture into an existing graph of the same shape, whose kernel nodes it
    # replaces: followed as a plain capture, whose end gives that graph back.
    Probe("cudaStreamBeginRecaptureToGraph", "capture_begin", 0, since="13.3"),
    Probe("cudaStreamBeginRecaptureToGraph_ptsz", "capture_begin", 0, since="13.3"),
    *_rt("cudaStreamEndCapture", "capture_end", 0, PTSZ),
    *_rt("cudaEventRecord", "event_record", 0, PTSZ),
    *_rt("cudaEventRecordWithFlags", "event_record", 0, PTSZ),
    *_rt("cudaStreamWaitEvent", "stream_wait", 0, PTSZ),
    *_rt("cudaGraphCreate", "graph_create"),
    *_rt("cudaGraphAddKernelNode", "graph_add_kernel", GRAPH_ADD_KERNEL_PARAMS),
    Probe("cudaGraphAddNode", "graph_add_kernel", GRAPH_ADD_NODE_PARAMS, since="12.2"),
    Probe("cudaGraphAddNode_v2", "graph_add_kernel", GRAPH_ADD_NODE_PARAMS, since="12.3",
          pos=GRAPH_ADD_NODE_V2_PARAMS_ARG),
    *_rt("cudaGraphAddChildGraphNode", "graph_add_child", GRAPH_ADD_CHILD),
    *_rt("cudaGraphClone", "graph_clone"),
    *_rt("cudaGraphInstantiate", "graph_instantiate"),
    *_rt("cudaGraphInstantiateWithFlags", "graph_instantiate"),
    Probe("cudaGraphInstantiateWithParams", "graph_instantiate", since="12.0"),
    Probe("cudaGraphInstantiateWithParams_ptsz", "graph_instantiate", since="12.0"),
    *_rt("cudaGraphExecUpdate", "graph_exec_update"),
    *_rt("cudaGraphDestroy", "graph_destroy"),
    *_rt("cudaGraphExecDestroy", "graph_exec_destroy"),
    *_rt("cudaStreamSynchronize", "sync", SYNC_CUDA_STREAM, PTSZ),
    *_rt("cudaDeviceSynchronize", "sync", SYNC_CUDA_DEVICE),
    *_rt("cudaEventSynchronize", "sync", SYNC_CUDA_EVENT),
    # Strided and 3D copies, peer copies, pinned host memory.
    *_at(RT_2D_WIDTH_ARG, _rt("cudaMemcpy2D", "copy_2d", MEMCPY_FROM_ARGS, PTDS)),
    *_at(RT_2D_WIDTH_ARG, _rt("cudaMemcpy2DAsync", "copy_2d", MEMCPY_FROM_ARGS, PTSZ)),
    *_at(RT_2D_ARRAY_WIDTH_ARG, _rt("cudaMemcpy2DToArray", "copy_2d", MEMCPY_FROM_ARGS, PTDS)),
    *_at(RT_2D_ARRAY_WIDTH_ARG,
         _rt("cudaMemcpy2DToArrayAsync", "copy_2d", MEMCPY_FROM_ARGS, PTSZ)),
    *_at(RT_2D_ARRAY_WIDTH_ARG,
         _rt("cudaMemcpy2DFromArray", "copy_2d", MEMCPY_FROM_ARGS, PTDS)),
    *_at(RT_2D_ARRAY_WIDTH_ARG,
         _rt("cudaMemcpy2DFromArrayAsync", "copy_2d", MEMCPY_FROM_ARGS, PTSZ)),
    *_at(RT_2D_ARRAY_TO_ARRAY_WIDTH_ARG,
         _rt("cudaMemcpy2DArrayToArray", "copy_2d", MEMCPY_FROM_ARGS, PTDS)),
    *_at(RT_3D, _rt("cudaMemcpy3D", "copy_3d", MEMCPY_FROM_ARGS, PTDS)),
    *_at(RT_3D, _rt("cudaMemcpy3DAsync", "copy_3d", MEMCPY_FROM_ARGS, PTSZ)),
    *_at(RT_3D_PEER, _rt("cudaMemcpy3DPeer", "copy_3d", MEMCPY_DEVICE_TO_DEVICE, PTDS)),
    *_at(RT_3D_PEER, _rt("cudaMemcpy3DPeerAsync", "copy_3d", MEMCPY_DEVICE_TO_DEVICE, PTSZ)),
    *_rt("cudaMemcpyPeer", "copy_peer", MEMCPY_DEVICE_TO_DEVICE),
    *_rt("cudaMemcpyPeerAsync", "copy_peer", MEMCPY_DEVICE_TO_DEVICE),
    *_rt("cudaMallocHost", "alloc", MEM_HOST),
    *_rt("cudaHostAlloc", "alloc", MEM_HOST),
    # --- completion points (issue #27; cudaEventRecord and the syncs are above) ---
    *_rt("cudaEventQuery", "event_query"),
    *_rt("cudaStreamQuery", "stream_query", 0, PTSZ),
    *_rt("cudaEventDestroy", "event_destroy"),
    *_rt("cudaEventElapsedTime", "event_elapsed"),
    *_rt("cudaStreamDestroy", "stream_destroy"),
))

DRIVER_PROBES: Final[tuple[Probe, ...]] = _per_thread_launches((
    *_drv("cuLaunchKernel", "drv_launch", 0, PTSZ),
    *_drv("cuLaunchCooperativeKernel", "drv_launch", 0, PTSZ),
    *_drv("cuLaunchKernelEx", "launch_ex", 0, PTSZ),
    *_drv("cuGraphLaunch", "graph_launch", 0, PTSZ),
    *_drv("cuMemcpy", "copy", MEMCPY_DEFAULT, PTDS),
    *_drv("cuMemcpyAsync", "copy", MEMCPY_DEFAULT, PTSZ),
    *_drv("cuMemcpyHtoD_v2", "copy", MEMCPY_HOST_TO_DEVICE, PTDS),
    *_drv("cuMemcpyHtoDAsync_v2", "copy", MEMCPY_HOST_TO_DEVICE, PTSZ),
    *_drv("cuMemcpyDtoH_v2", "copy", MEMCPY_DEVICE_TO_HOST, PTDS),
    *_drv("cuMemcpyDtoHAsync_v2", "copy", MEMCPY_DEVICE_TO_HOST, PTSZ),
    *_drv("cuMemcpyDtoD_v2", "copy", MEMCPY_DEVICE_TO_DEVICE, PTDS),
    *_drv("cuMemcpyDtoDAsync_v2", "copy", MEMCPY_DEVICE_TO_DEVICE, PTSZ),
    *_drv("cuMemAlloc_v2", "alloc", MEM_DEVICE),
    *_drv("cuCtxSetCurrent", "ctx_set"),
    *_drv("cuCtxPushCurrent_v2", "ctx_set", 1),
    *_drv("cuCtxPopCurrent_v2", "ctx_pop"),
    *_drv("cuDevicePrimaryCtxRetain", "ctx_made", CTX_DEV_PARAM_RETAIN),
    *_drv("cuCtxCreate_v2", "ctx_made", 3),
    *_drv("cuCtxCreate_v3", "ctx_made", 5),
    Probe("cuCtxCreate_v4", "ctx_made", CTX_DEV_PARAM_V4, True, since="12.5"),
    *_drv("cuDeviceGetUuid", "device_uuid", 0, "_v2"),
    *_drv("cuDeviceGetPCIBusId", "device_pci"),
    *_drv("cuStreamBeginCapture", "capture_begin", 0, PTSZ),
    *_drv("cuStreamBeginCapture_v2", "capture_begin", 0, PTSZ),
    Probe("cuStreamBeginCaptureToGraph", "capture_begin", 1, True, since="12.3"),
    Probe("cuStreamBeginCaptureToGraph_ptsz", "capture_begin", 1, True, since="12.3"),
    Probe("cuStreamBeginRecaptureToGraph", "capture_begin", 0, True, since="13.3"),
    Probe("cuStreamBeginRecaptureToGraph_ptsz", "capture_begin", 0, True, since="13.3"),
    *_drv("cuStreamEndCapture", "capture_end", 0, PTSZ),
    *_drv("cuEventRecord", "event_record", 0, PTSZ),
    *_drv("cuEventRecordWithFlags", "event_record", 0, PTSZ),
    *_drv("cuStreamWaitEvent", "stream_wait", 0, PTSZ),
    *_drv("cuGraphCreate", "graph_create"),
    *_drv("cuGraphAddKernelNode", "graph_add_kernel", GRAPH_ADD_KERNEL_PARAMS, "_v2"),
    *_drv("cuGraphAddNode", "graph_add_kernel", GRAPH_ADD_NODE_PARAMS),
    Probe("cuGraphAddNode_v2", "graph_add_kernel", GRAPH_ADD_NODE_PARAMS, True, since="12.3",
          pos=GRAPH_ADD_NODE_V2_PARAMS_ARG),
    # CUDA 13.4: cuGraphAddNode_v2's arguments (called by name: cuGraphAddNode is still _v2).
    Probe("cuGraphAddNode_v3", "graph_add_kernel", GRAPH_ADD_NODE_PARAMS, True, since="13.4",
          pos=GRAPH_ADD_NODE_V2_PARAMS_ARG),
    *_drv("cuGraphAddChildGraphNode", "graph_add_child", GRAPH_ADD_CHILD),
    *_drv("cuGraphClone", "graph_clone"),
    *_drv("cuGraphInstantiate", "graph_instantiate", 0, "_v2"),
    *_drv("cuGraphInstantiateWithFlags", "graph_instantiate"),
    *_drv("cuGraphInstantiateWithParams", "graph_instantiate", 0, PTSZ),
    *_drv("cuGraphExecUpdate", "graph_exec_update", 0, "_v2"),
    *_drv("cuGraphDestroy", "graph_destroy"),
    *_drv("cuGraphExecDestroy", "graph_exec_destroy"),
    *_drv("cuStreamSynchronize", "sync", SYNC_CU_STREAM, PTSZ),
    *_drv("cuCtxSynchronize", "sync", SYNC_CU_CTX),
    # CUDA 13.0: the context to synchronise as argument (a new call, not a #define).
    Probe("cuCtxSynchronize_v2", "sync", SYNC_CU_CTX, True, since="13.0"),
    *_drv("cuEventSynchronize", "sync", SYNC_CU_EVENT),
    # Strided and 3D copies (the kind from the memory types), peer copies, pinned host
    # memory, stream-ordered and managed allocations.
    *_drv("cuMemcpy2D_v2", "drv_copy_2d", MEMCPY_FROM_ARGS, PTDS),
    *_drv("cuMemcpy2DUnaligned_v2", "drv_copy_2d", MEMCPY_FROM_ARGS, PTDS),
    *_drv("cuMemcpy2DAsync_v2", "drv_copy_2d", MEMCPY_FROM_ARGS, PTSZ),
    *_drv("cuMemcpy3D_v2", "drv_copy_3d", MEMCPY_FROM_ARGS, PTDS),
    *_drv("cuMemcpy3DAsync_v2", "drv_copy_3d", MEMCPY_FROM_ARGS, PTSZ),
    *_drv("cuMemcpy3DPeer", "drv_copy_3d", MEMCPY_FROM_ARGS, PTDS),
    *_drv("cuMemcpy3DPeerAsync", "drv_copy_3d", MEMCPY_FROM_ARGS, PTSZ),
    *_drv("cuMemcpyPeer", "copy_peer", MEMCPY_DEVICE_TO_DEVICE, PTDS),
    *_drv("cuMemcpyPeerAsync", "copy_peer", MEMCPY_DEVICE_TO_DEVICE, PTSZ),
    *_drv("cuMemHostAlloc", "alloc", MEM_HOST),
    *_drv("cuMemAllocHost_v2", "alloc", MEM_HOST),
    *_drv("cuMemAllocAsync", "alloc", MEM_DEVICE, PTSZ),
    *_drv("cuMemAllocManaged", "alloc", MEM_MANAGED),
    *_drv("cuModuleGetFunction", "drv_get_function"),
    *_drv("cuLibraryGetKernel", "drv_get_function"),
    *_drv("cuKernelGetFunction", "drv_kernel_function"),
    # --- completion points (issue #27; cuEventRecord and the syncs are above) ---
    *_drv("cuEventQuery", "event_query"),
    *_drv("cuStreamQuery", "stream_query", 0, PTSZ),
    *_drv("cuEventDestroy_v2", "event_destroy"),
    *_drv("cuEventElapsedTime", "event_elapsed"),
    *_drv("cuStreamDestroy_v2", "stream_destroy"),
))


# --- HIP (AMD's libamdhip64, ROCm 5.x to 7.x): issue #23 --------------------------------
# The HIP runtime mirrors the CUDA runtime's C ABI (hipLaunchKernel is cudaLaunchKernel's
# layout, hipModuleLaunchKernel cuLaunchKernel's, hipMemcpyKind cudaMemcpyKind's values,
# hipMemcpy3DParms cudaMemcpy3DParms' layout): the CUDA entry programs serve, the cookie's
# COOKIE_HIP telling the api. The hipModule* calls are the "driver" side of the frames, so
# a module launch made inside a hipLaunchKernel is not counted again.
# `since`: the first ROCm release recorded to export it, when after 5.2 (checked against
# ROCm/clr's hip_hcc.map.in of each recorded release, tests/fixtures/hip/; a name may be
# added to an older version node in a later release).
SPT = "_spt"  # the per-thread default stream (hipcc -fgpu-default-stream=per-thread)
# hipExtModuleLaunchKernel / hipHccModuleLaunchKernel are exported only under their C++
# names (hip_ext.h declares them with default arguments); the same in every release.
HIP_EXT_MODULE_LAUNCH: Final = ("_Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjm"
                                "P12ihipStream_tPPvS4_P11ihipEvent_tS6_j")
HIP_HCC_MODULE_LAUNCH: Final = ("_Z24hipHccModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjm"
                                "P12ihipStream_tPPvS4_P11ihipEvent_tS6_")


# __hipRegisterFunction returns void: its return is not judged, the name is sent then
# (numbered apart from the CUDA ops, which may grow).
OP_HIP_REGISTER: Final = 40
OP_HIP_DEVICE_PROPS: Final = 41  # hipGetDeviceProperties*: the PCI fields of an ordinal
EV_HIP_DEVICE_PCI: Final = 40  # id = a device ordinal, target = domain << 32 | bus << 8 | dev
# The PCI fields of hipDeviceProp_t (a probe's arg says which layout): R0000 (ROCm 5.x, and
# 6.x's hipGetDeviceProperties/R0000 for older binaries) has int pciDomainID, pciBusID,
# pciDeviceID from byte 364; R0600 (6.x's hipGetDeviceProperties, a #define of
# hipGetDevicePropertiesR0600) int pciBusID, pciDeviceID, pciDomainID from byte 584
# (offsetof in ROCm 5.2's and 6.0-6.2's headers: tests/fixtures/hip/device-prop-offsets.txt).
# hipKernelNodeParams { dim3 blockDim; void **extra; void *func; dim3 gridDim; ... }: the
# kernel handle after the block size and `extra` (ROCm 5.2's header and 6.x's, 7.x's
# alike), not first as in CUDA's struct. hipGraphNodeParams (hipGraphAddNode, 6.2+) is
# CUDA's layout: the type (hipGraphNodeTypeKernel 0, hipGraphNodeTypeGraph 4 from ROCm
# 6.0 on; 5.2's enum had 1 and 5, but no hipGraphAddNode), the union at byte 16.
HIP_KNODE_FUNC_OFF: Final = 24
# hipMemcpyToSymbol / hipMemcpyFromSymbol[Async](dst or symbol, src or symbol, size_t bytes,
# size_t offset, hipMemcpyKind kind[, stream]): the kind is the 5th argument (a probe's
# `pos`), the bytes the 3rd as in hipMemcpy.
SYMBOL_COPY_KIND_ARG: Final = 5
HIP_PROPS_R0000: Final = 0
HIP_PROPS_R0600: Final = 1
HIP_PROPS_R0000_PCI_OFF: Final = 364
HIP_PROPS_R0600_PCI_OFF: Final = 584


def _hip(symbol: str, program: str, arg: int = 0, *suffixes: str, module: bool = False,
         since: str = "", spt_since: str = "", pos: int = 0) -> tuple[Probe, ...]:
    """A HIP call and its per-thread-stream variants (`spt_since`: when those came). The
    _spt launches get a program of their own (hip_launch_spt), as CUDA's _ptsz ones: a
    NULL stream there is the calling thread's default stream (clr's
    PER_THREAD_DEFAULT_STREAM), and a launch does not read its probe's cookie."""
    return tuple(Probe(symbol + s, program + s if s and program == "hip_launch" else program,
                       arg, module, since=spt_since if s else since, pos=pos, hip=True)
                 for s in ("", *suffixes))


HIP_PROBES: Final[tuple[Probe, ...]] = (
    # Launches: counted here only (hipcc's <<<>>> stub calls __hipPushCallConfiguration,
    # __hipPopCallConfiguration, then hipLaunchKernel: none of the first two is probed).
    *_hip("hipLaunchKernel", "hip_launch", 0, SPT),
    *_hip("hipExtLaunchKernel", "hip_launch"),
    *_hip("hipLaunchCooperativeKernel", "hip_launch", 0, SPT),
    *_hip("hipLaunchKernelExC", "launch_ex", since="6.5"),
    *_hip("hipGraphLaunch", "graph_launch", 0, SPT, spt_since="5.3"),
    *_hip("hipModuleLaunchKernel", "hip_module_launch", module=True),
    *_hip("hipModuleLaunchCooperativeKernel", "hip_module_launch", module=True, since="5.5"),
    *_hip(HIP_EXT_MODULE_LAUNCH, "hip_ext_module_launch", module=True),
    *_hip(HIP_HCC_MODULE_LAUNCH, "hip_ext_module_launch", module=True),
    *_hip("hipDrvLaunchKernelEx", "launch_ex", module=True, since="6.5"),
    # Names: a host stub's (its kernel handle's) device name, registered by the module
    # constructor hipcc emits; a module function's, looked up by name.
    *_hip("__hipRegisterFunction", "hip_register"),
    *_hip("hipModuleGetFunction", "drv_get_function", module=True),
    # Copies: the kind an argument (hipMemcpyKind) or the call's.
    *_hip("hipMemcpy", "copy", MEMCPY_FROM_ARGS, SPT),
    *_hip("hipMemcpyAsync", "copy", MEMCPY_FROM_ARGS, SPT),
    *_hip("hipMemcpyWithStream", "copy", MEMCPY_FROM_ARGS),
    *_hip("hipMemcpyHtoD", "copy", MEMCPY_HOST_TO_DEVICE),
    *_hip("hipMemcpyHtoDAsync", "copy", MEMCPY_HOST_TO_DEVICE),
    *_hip("hipMemcpyDtoH", "copy", MEMCPY_DEVICE_TO_HOST),
    *_hip("hipMemcpyDtoHAsync", "copy", MEMCPY_DEVICE_TO_HOST),
    *_hip("hipMemcpyDtoD", "copy", MEMCPY_DEVICE_TO_DEVICE),
    *_hip("hipMemcpyDtoDAsync", "copy", MEMCPY_DEVICE_TO_DEVICE),
    *_hip("hipMemcpyPeer", "copy_peer", MEMCPY_DEVICE_TO_DEVICE),
    *_hip("hipMemcpyPeerAsync", "copy_peer", MEMCPY_DEVICE_TO_DEVICE),
    *_hip("hipMemcpy2D", "copy_2d", MEMCPY_FROM_ARGS, SPT, pos=RT_2D_WIDTH_ARG),
    *_hip("hipMemcpy2DAsync", "copy_2d", MEMCPY_FROM_ARGS, SPT, spt_since="5.3",
          pos=RT_2D_WIDTH_ARG),
    *_hip("hipMemcpy2DToArray", "copy_2d", MEMCPY_FROM_ARGS, SPT, pos=RT_2D_ARRAY_WIDTH_ARG),
    *_hip("hipMemcpy2DToArrayAsync", "copy_2d", MEMCPY_FROM_ARGS, SPT, spt_since="5.3",
          pos=RT_2D_ARRAY_WIDTH_ARG),
    *_hip("hipMemcpy2DFromArray", "copy_2d", MEMCPY_FROM_ARGS, SPT,
          pos=RT_2D_ARRAY_WIDTH_ARG),
    *_hip("hipMemcpy2DFromArrayAsync", "copy_2d", MEMCPY_FROM_ARGS, SPT, spt_since="5.3",
          pos=RT_2D_ARRAY_WIDTH_ARG),
    *_hip("hipMemcpy2DArrayToArray", "copy_2d", MEMCPY_FROM_ARGS, since="6.2",
          pos=RT_2D_ARRAY_TO_ARRAY_WIDTH_ARG),
    *_hip("hipMemcpy3D", "copy_3d", MEMCPY_FROM_ARGS, SPT, pos=RT_3D),
    *_hip("hipMemcpy3DAsync", "copy_3d", MEMCPY_FROM_ARGS, SPT, spt_since="5.3", pos=RT_3D),
    # Copies to and from a __device__ variable: the kind is their 5th argument.
    *_hip("hipMemcpyToSymbol", "copy", MEMCPY_FROM_ARGS, SPT, pos=SYMBOL_COPY_KIND_ARG),
    *_hip("hipMemcpyToSymbolAsync", "copy", MEMCPY_FROM_ARGS, SPT, spt_since="5.3",
          pos=SYMBOL_COPY_KIND_ARG),
    *_hip("hipMemcpyFromSymbol", "copy", MEMCPY_FROM_ARGS, SPT, pos=SYMBOL_COPY_KIND_ARG),
    *_hip("hipMemcpyFromSymbolAsync", "copy", MEMCPY_FROM_ARGS, SPT, spt_since="5.3",
          pos=SYMBOL_COPY_KIND_ARG),
    # Allocations.
    *_hip("hipMalloc", "alloc", MEM_DEVICE),
    *_hip("hipExtMallocWithFlags", "alloc", MEM_DEVICE),
    *_hip("hipMallocAsync", "alloc", MEM_DEVICE),
    *_hip("hipMallocFromPoolAsync", "alloc", MEM_DEVICE),
    *_hip("hipMallocManaged", "alloc", MEM_MANAGED),
    *_hip("hipHostMalloc", "alloc", MEM_HOST),
    *_hip("hipMallocHost", "alloc", MEM_HOST),
    *_hip("hipHostAlloc", "alloc", MEM_HOST),
    # Synchronising calls.
    *_hip("hipDeviceSynchronize", "sync", SYNC_HIP_DEVICE),
    *_hip("hipStreamSynchronize", "sync", SYNC_HIP_STREAM, SPT),
    *_hip("hipEventSynchronize", "sync", SYNC_HIP_EVENT),
    # The thread's device, and what the process was told an ordinal is.
    *_hip("hipSetDevice", "set_device"),
    *_hip("hipDeviceGetPCIBusId", "device_pci"),
    *_hip("hipGetDeviceProperties", "hip_device_props", HIP_PROPS_R0000),
    *_hip("hipGetDevicePropertiesR0000", "hip_device_props", HIP_PROPS_R0000, since="6.0"),
    *_hip("hipGetDevicePropertiesR0600", "hip_device_props", HIP_PROPS_R0600, since="6.0"),
    # Graphs: stream capture and the executable graphs made of it, as CUDA's.
    *_hip("hipStreamBeginCapture", "capture_begin", 0, SPT, spt_since="5.3"),
    # (in the hip_6.1 node from ROCm 6.2 on; so is hipGraphInstantiateWithParams)
    *_hip("hipStreamBeginCaptureToGraph", "capture_begin", 1, since="6.2"),
    *_hip("hipStreamEndCapture", "capture_end", 0, SPT, spt_since="5.3"),
    # hipEventRecord_spt is in the hip_5.2 node, but 5.2.3's library does not define it.
    *_hip("hipEventRecord", "event_record", 0, SPT, spt_since="6.0"),
    *_hip("hipEventRecordWithFlags", "event_record", since="6.4"),
    *_hip("hipStreamWaitEvent", "stream_wait", 0, SPT),
    # Completion points (issue #27 for HIP; hipEventRecord, hipStreamWaitEvent and the
    # syncs are above): hipErrorNotReady (600) is cudaErrorNotReady's value, an answer.
    # hipEventQuery, hipEventDestroy and hipEventElapsedTime have no _spt variant.
    *_hip("hipEventQuery", "event_query"),
    *_hip("hipStreamQuery", "stream_query", 0, SPT),
    *_hip("hipEventDestroy", "event_destroy"),
    *_hip("hipEventElapsedTime", "event_elapsed"),
    *_hip("hipStreamDestroy", "stream_destroy"),
    *_hip("hipGraphCreate", "graph_create"),
    *_hip("hipGraphAddKernelNode", "graph_add_kernel", GRAPH_ADD_KERNEL_PARAMS),
    # (in the hip_5.5 node from ROCm 6.2 on)
    *_hip("hipGraphAddNode", "graph_add_kernel", GRAPH_ADD_NODE_PARAMS, since="6.2"),
    *_hip("hipGraphAddChildGraphNode", "graph_add_child", GRAPH_ADD_CHILD),
    *_hip("hipGraphClone", "graph_clone"),
    *_hip("hipGraphInstantiate", "graph_instantiate"),
    *_hip("hipGraphInstantiateWithFlags", "graph_instantiate"),
    *_hip("hipGraphInstantiateWithParams", "graph_instantiate", since="6.2"),
    *_hip("hipGraphExecUpdate", "graph_exec_update"),
    *_hip("hipGraphDestroy", "graph_destroy"),
    *_hip("hipGraphExecDestroy", "graph_exec_destroy"),
)
# --- end of HIP --------------------------------------------------------------------------

ALL_PROBES: Final = RUNTIME_PROBES + DRIVER_PROBES + HIP_PROBES
SYNC_NAMES: Final = {p.arg: p.call for p in ALL_PROBES if p.program == "sync"}

# What each entry program makes of a call that returns success (the return program counts
# a failure in gpu_cuda_errors_total whatever the program): the probe table of
# docs/ebpf.md is generated from this and the probe lists (`make docs`).
COUNTS: Final[dict[str, str]] = {
    "rt_launch": "a launch: `gpu_kernel_launch_calls_total{cuda_api=\"runtime\"}`, named "
                 "from the host function; grid and block size from the `dim3` arguments",
    "rt_launch_ptsz": "a launch, as `cudaLaunchKernel` (a NULL stream is the thread's "
                      "default stream)",
    "drv_launch_ptsz": "a launch, as `cuLaunchKernel` (a NULL stream is the thread's "
                       "default stream)",
    "launch_ex": "a launch: `gpu_kernel_launch_calls_total`; grid and block size from the "
                 "launch configuration struct",
    "drv_launch": "a launch: `gpu_kernel_launch_calls_total{cuda_api=\"driver\"}`, named "
                  "from the `CUfunction`; grid and block size from the arguments",
    "graph_launch": "a graph launch: `gpu_kernel_launch_calls_total{cuda_api=\"graph\"}`",
    "copy": "a copy: `gpu_memory_copies_bytes`, bytes = the byte count argument",
    "copy_peer": "a copy between devices: `gpu_memory_copies_bytes`, bytes = the byte "
                 "count argument",
    "copy_2d": "a copy: `gpu_memory_copies_bytes`, bytes = `width` × `height`",
    "copy_3d": "a copy: `gpu_memory_copies_bytes`, bytes = `extent.width` × `height` × "
               "`depth` (with a CUDA array on one side the extent is in array elements: "
               "not observed, counted in `gpu_exporter_ebpf_events_dropped_total"
               "{reason=\"copy_size_unknown\"}`)",
    "drv_copy_2d": "a copy: `gpu_memory_copies_bytes`, bytes = `WidthInBytes` × `Height` "
                   "of the `CUDA_MEMCPY2D`; `cuda_memcpy_kind` from its memory types",
    "drv_copy_3d": "a copy: `gpu_memory_copies_bytes`, bytes = `WidthInBytes` × `Height` × "
                   "`Depth` of the `CUDA_MEMCPY3D`/`CUDA_MEMCPY3D_PEER`; `cuda_memcpy_kind` "
                   "from its memory types",
    "alloc": "an allocation: `gpu_memory_allocations_bytes`, bytes = the size argument",
    "sync": "a synchronisation: `gpu_sync_duration_seconds`; a completion point: closes "
            "the kernel duration samples it covers",
    "rt_get_kernel": "no count: maps a CUDA 13 kernel handle to its host function (names)",
    "drv_get_function": "no count: names a `CUfunction`/`CUkernel` (kernel names)",
    "drv_kernel_function": "no count: maps a `CUfunction` to its `CUkernel` (kernel names)",
    "set_device": "no count: the calling thread's current device (device labels)",
    "ctx_set": "no count: the calling thread's current device is the context's (device "
               "labels)",
    "ctx_pop": "no count: the calling thread's current device is the context's below "
               "(device labels)",
    "ctx_made": "no count: the device of the context made (device labels)",
    "device_uuid": "no count: the UUID of a device ordinal, as the process was told it "
                   "(device labels)",
    "device_pci": "no count: the PCI address of a device ordinal, as the process was told "
                  "it (device labels)",
    "capture_begin": "no count: the stream is under capture: launches on it are graph "
                     "nodes, not executions",
    "capture_end": "no count: the capture's kernel nodes are the graph's",
    "event_record": "no count: a completion point on the stream (kernel durations); an "
                    "event recorded on a stream under capture joins the streams that "
                    "wait on it to the capture",
    "event_query": "no count: a completion point: success bounds the kernels before the "
                   "event's record, *not ready* (not an error) bounds the start of those "
                   "after it",
    "stream_query": "no count: a completion point: success bounds the kernels launched on "
                    "the stream; *not ready* is not an error",
    "event_destroy": "no count: the event's completion state is forgotten",
    "stream_destroy": "no count: the stream's completion state is retired (its launches "
                      "not yet covered are left to a device synchronise), so that a new "
                      "stream given the same handle starts afresh",
    "event_elapsed": "`gpu_kernel_elapsed_seconds`, when the span between the two events "
                     "holds exactly one launch (recorded back to back on one stream)",
    "stream_wait": "no count: a stream that waits on a captured event joins the capture",
    "graph_create": "no count: a new, empty graph",
    "graph_add_kernel": "no count: a kernel node of a graph",
    "graph_add_child": "no count: the graph gains the child graph's kernel nodes as they "
                       "are then",
    "graph_clone": "no count: the new graph has the original's kernel nodes",
    "graph_instantiate": "no count: the executable graph runs the graph's kernel nodes: "
                         "each launch of it counts each of them",
    "graph_exec_update": "no count: the executable graph runs the graph's kernel nodes "
                         "from then on (launches before keep the kernels they ran)",
    "graph_destroy": "no count: the graph's kernel nodes are forgotten",
    "graph_exec_destroy": "no count: the executable graph's launch counters are final "
                          "(folded into the exporter's own totals)",
}
# HIP's own entry programs (issue #23).
COUNTS.update({
    "hip_launch": "a launch: `gpu_kernel_launch_calls_total{cuda_api=\"hip\"}`, named from "
                  "the kernel handle (its registered device name, else its ELF symbol); grid "
                  "and block size from the `dim3` arguments",
    "hip_launch_spt": "a launch, as `hipLaunchKernel` (a NULL stream is the thread's "
                      "default stream)",
    "hip_module_launch": "a launch: `gpu_kernel_launch_calls_total{cuda_api=\"hip_module\"}`,"
                         " named from the `hipFunction_t`; grid and block size from the "
                         "arguments",
    "hip_ext_module_launch": "a launch: `gpu_kernel_launch_calls_total"
                             "{cuda_api=\"hip_module\"}`, named from the `hipFunction_t`; "
                             "blocks per grid = global work size / local work size",
    "hip_device_props": "no count: the PCI address of a device ordinal (the `pciDomainID`, "
                        "`pciBusID`, `pciDeviceID` of the properties), as the process was "
                        "told it (device labels)",
    "hip_register": "no count: names a kernel handle (read when the call returns: the "
                    "runtime has read the name by then, so its page is in memory)",
})
# What a CUDA entry program counts, said of the HIP calls it is attached to.
HIP_COUNTS: Final[dict[str, str]] = {
    "launch_ex": "a launch: `gpu_kernel_launch_calls_total` (`cuda_api=\"hip\"`, "
                 "`\"hip_module\"` for `hipDrvLaunchKernelEx`); grid and block size from "
                 "the launch configuration struct",
    "graph_launch": "a graph launch: `gpu_kernel_launch_calls_total{cuda_api=\"hip_graph\"}`",
    "drv_get_function": "no count: names a `hipFunction_t` (kernel names)",
}
BY_SYMBOL: Final = {p.symbol: p for p in ALL_PROBES}
ENTRY_PROGRAMS: Final = tuple(sorted({p.program for p in ALL_PROBES}))


def cookie(index: int) -> int:
    """The BPF cookie of probe ALL_PROBES[index] (see program.c, COOKIE_*)."""
    p = ALL_PROBES[index]
    assert p.pos < 1 << 5, p  # COOKIE_POS: 5 bits
    return (index | p.arg << 16 | int(p.driver) << 24 | p.pos << 25
            | int(p.hip) << COOKIE_HIP_SHIFT
            | int(p.symbol.endswith(PTSZ) or (p.hip and p.symbol.endswith(SPT)))
            << COOKIE_PTSZ_SHIFT)


INDEX: Final = {p.symbol: i for i, p in enumerate(ALL_PROBES)}


LAUNCH_PROGRAMS: Final = ("rt_launch", "launch_ex", "drv_launch", "graph_launch",
                          "hip_launch", "hip_module_launch", "hip_ext_module_launch")
COPY_PROGRAMS: Final = (
    "copy", "copy_peer", "copy_2d", "copy_3d", "drv_copy_2d", "drv_copy_3d")
ALLOC_PROGRAMS: Final = ("alloc",)
SYNC_PROGRAMS: Final = ("sync",)


def calls_of(programs: tuple[str, ...]) -> str:
    """The documented calls these programs are attached to, in probe order: what
    docs/metrics.md names as a family's sources."""
    return ", ".join(dict.fromkeys(p.call for p in ALL_PROBES if p.program in programs))
# A mapped file that defines one of these is probed whatever its name (a runtime linked
# statically into a binary, a wheel's hashed libcudart-1a2b3c4d.so.12).
MARKER_SYMBOLS: Final = frozenset({"cudaLaunchKernel", "cuLaunchKernel", "hipLaunchKernel"})
