"""CUDA activity from eBPF uprobes on libcudart / libcuda: launches by kernel name,
copies, allocations, synchronisations (see docs/ebpf.md)."""

from __future__ import annotations

import logging
import os
import platform
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol, TypeVar

from gpu_exporter.collectors.base import Availability, Collector, CollectorFault, Feature, Sink
from gpu_exporter.model import catalogue as c
from gpu_exporter.model import flagtypes
from gpu_exporter.model.metric_types import Buckets
from gpu_exporter.model.settings import Option, Settings
from gpu_exporter.readers import files
from gpu_exporter.sources.ebpf import arch, hip_devices, names
from gpu_exporter.sources.ebpf.reading import CallHistogram, CudaActivity, NvmlView
from gpu_exporter.sources.ebpf.uprobes import MECHANISMS
from gpu_exporter.sources.nvml import stack as nvml_stack
from gpu_exporter.sources.nvml.calls import NvmlUnavailable
from gpu_exporter.sources.nvml.stack import StackBusy

log = logging.getLogger("gpu_exporter.collectors.ebpf")

# Capability bits (linux/capability.h).
CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39


def effective_capabilities(procfs: str = "/proc") -> int | None:
    try:
        for line in files.read_text(f"{procfs}/self/status", 64 * 1024).splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return None


def missing_privileges(caps: int | None) -> str | None:
    if caps is None:
        return "cannot read the process capabilities (/proc/self/status)"
    if caps & (1 << CAP_SYS_ADMIN):
        return None
    need = [name for bit, name in ((CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON"))
            if not caps & (1 << bit)]
    return f"missing {' and '.join(need)} (run as root or grant them)" if need else None


def kernel_headers_missing() -> str | None:
    """bcc compiles against the running kernel's headers (or the kheaders module)."""
    release = platform.release()
    build = f"/lib/modules/{release}/build"
    if os.path.isdir(os.path.join(build, "include")) or os.path.exists(
            "/sys/kernel/kheaders.tar.xz"):
        return None
    return (f"kernel headers not found at {build} (install linux-headers for this kernel "
            "or link them there, see docs/ebpf.md)")


NAMES_MAX = Option(
    "ebpf.kernel-names-max", flagtypes.Count(1, 100_000), 500,
    "Distinct cuda_kernel_name values kept; later names are reported as \"other\".")
EXECUTABLES_MAX = Option(
    "ebpf.executable-names-max", flagtypes.Count(1, 100_000), names.EXECUTABLES_MAX,
    "Distinct process_executable_name values with series of their own; processes of "
    "later names are reported as \"other\" for their life and counted by "
    "gpu_exporter_ebpf_executables_folded_total. A name's place is free again once its "
    "processes have exited and their series expired.")
EXITED_EXPIRY = Option(
    "ebpf.exited-series-expiry", flagtypes.Seconds(1, 7 * 86400), names.EXPIRY_SECONDS,
    "Seconds the CUDA series of exited processes are kept after their last count; then "
    "they are dropped (a counter never goes down), unless a running process adds to "
    "them or has their executable name.")
PID_LABEL = Option(
    "ebpf.pid-label", bool, False,
    "Add process_pid to the CUDA activity families (one series per process).", is_flag=True)
RESCAN_INTERVAL = Option(
    "ebpf.rescan-interval", flagtypes.Seconds(0.1, 3600), 10.0,
    "Seconds between scans of every /proc/*/maps (processes are also scanned when they "
    "exec or map a file); files no process maps any more are detached after two.")
ATTACH_MECHANISM = Option(
    "ebpf.attach-mechanism", flagtypes.Choice(("auto", *MECHANISMS)), "auto",
    "How probes are attached: uprobe_multi links (Linux 6.6+, detached in bulk), "
    "perf_event (older kernels, about 0.1 s per probe to detach), or auto: the first the "
    "kernel has.")


class ActivitySource(Protocol):
    """Where the collector reads CUDA activity: the probe engine (`ebpf.engine.Engine`),
    or any source with its read() and its attach facts (passed to the collector)."""

    @property
    def wanted_mechanism(self) -> str: ...

    @property
    def mechanism_problem(self) -> str | None: ...

    @property
    def tracking_problem(self) -> str | None: ...

    @property
    def mechanism(self) -> str: ...

    def read(self, nvml: NvmlView | None = None) -> CudaActivity: ...

    def close(self) -> None: ...


class EbpfCollector(Collector):
    name: ClassVar[str] = "ebpf"
    help: ClassVar[str] = ("CUDA and HIP kernel launches, copies, allocations and "
                           "synchronisations from uprobes on libcudart/libcuda and AMD's "
                           "libamdhip64 (root, Linux on x86-64; also "
                           "OTEL_GPU_EBPF_ENABLED=true).")
    default_enabled: ClassVar[bool] = False
    options: ClassVar[Sequence[Option[Any]]] = (NAMES_MAX, EXECUTABLES_MAX, EXITED_EXPIRY,
                                                PID_LABEL, RESCAN_INTERVAL, ATTACH_MECHANISM)

    _nvml: nvml_stack.NvmlStack | None = None
    _nvml_problem: NvmlUnavailable | StackBusy | None = None
    _amd_cards: frozenset[str] = frozenset()  # amdgpu cards at the last scrape
    _hip_libraries: tuple[str, ...] = ()  # HIP runtimes with probes at the last scrape

    def __init__(self, settings: Settings, source: ActivitySource | None = None) -> None:
        """`source`: read CUDA activity from it instead of attaching probes (start()
        then only reports it enabled)."""
        super().__init__(settings)
        self._engine: ActivitySource | None = source

    def start(self) -> Availability:
        if self._engine is not None:
            return Availability.enabled()
        if platform.system() != "Linux":
            return Availability.unavailable(f"eBPF needs Linux, this is {platform.system()}")
        # Before bcc: on a CPU the probes are not built for, nothing below may run.
        other_cpu = arch.unsupported()
        if other_cpu is not None:
            return other_cpu
        try:
            import bcc
        except ImportError as exc:
            return Availability.unavailable(
                f"bcc Python bindings not importable ({exc}): install python3-bpfcc and run "
                "with the system python3 or a venv made with --system-site-packages")
        except Exception as exc:  # libbcc.so itself missing or broken
            return Availability.unavailable(f"bcc failed to load: {exc}")
        problem = missing_privileges(effective_capabilities()) or kernel_headers_missing()
        if problem:
            return Availability.unavailable(problem)
        from gpu_exporter.sources.ebpf.engine import Engine
        from gpu_exporter.sources.ebpf.loader import LoadError

        if self.settings.check_only:
            return self._check(bcc)
        engine = Engine(
            self.settings.procfs,
            names_max=self.settings.get(NAMES_MAX),
            pid_label=self.settings.get(PID_LABEL),
            rescan_interval=self.settings.get(RESCAN_INTERVAL),
            mechanism=self.settings.get(ATTACH_MECHANISM),
            executables_max=self.settings.get(EXECUTABLES_MAX),
            expiry_seconds=self.settings.get(EXITED_EXPIRY),
        )
        try:
            engine.start(bcc)
        except LoadError as exc:
            raise CollectorFault(str(exc)) from exc
        self._engine = engine
        # The device of each call is judged by NVML's process lists (the exporter's one
        # NVML stack, shared with the nvidia and processes collectors; the lists are read
        # once a scrape for both, `sink.inputs.nvml_processes`).
        self._nvml = nvml_stack.attach(self.settings)
        return Availability.enabled()

    def _check(self, bcc: Any) -> Availability:
        """`doctor`: everything start() needs, without attaching a probe anywhere."""
        from gpu_exporter.sources.ebpf.libraries import Scanner
        from gpu_exporter.sources.ebpf.loader import LoadError, check

        try:
            mechanism = check(bcc)
        except LoadError as exc:
            raise CollectorFault(str(exc)) from exc
        files = sorted({c.path for c in Scanner(self.settings.procfs).scan().cuda_files.values()})
        would = (f"would probe {len(files)} CUDA library files: {', '.join(files)}" if files
                 else "no process maps a CUDA library now")
        return Availability.enabled(
            f"program compiles and loads, attaching through {mechanism}; {would}")

    def features(self) -> Sequence[Feature]:
        if self._engine is None:
            return ()
        e = self._engine
        slow = "attaching through perf_event: each probe takes about 0.1 s to detach"
        if e.mechanism_problem is None:
            detach = Availability.enabled(f"{e.mechanism}: probes detached in bulk")
        elif e.wanted_mechanism == "perf_event":
            detach = Availability.disabled(f"{slow} (--ebpf.attach-mechanism=perf_event)",
                                           "--ebpf.attach-mechanism=auto")
        else:
            detach = Availability.unavailable(f"{e.mechanism_problem}; {slow}",
                                              "run Linux 6.6 or newer (uprobe_multi links)")
        tracking = (Availability.enabled("processes scanned when they exec or map a file")
                    if e.tracking_problem is None else Availability.unavailable(
                        f"{e.tracking_problem}: new CUDA files are found by the rescan only, "
                        "calls made before it are not seen",
                        "mount tracefs and run with the syscalls tracepoints "
                        "(CONFIG_FTRACE_SYSCALLS)"))
        problem = self._nvml_problem
        amd = (f"DRM fdinfo tells each HIP call's AMD GPU ({len(self._amd_cards)} amdgpu "
               "cards): a process with one GPU open, or its ordinals")
        nvml = "NVML's process lists tell each call's GPU"
        devices = (Availability.enabled(f"{nvml}; {amd}" if self._amd_cards else nvml)
                   if problem is None else
                   Availability.enabled(f"{amd}; NVIDIA GPUs: {problem}") if self._amd_cards
                   else Availability.unavailable(
                       f"{problem}: the CUDA families carry no device labels",
                       problem.fix if isinstance(problem, NvmlUnavailable) else
                       "see the nvidia collector's state: NVML is slow to start"))
        features = [Feature("fast_detach", detach), Feature("exec_tracking", tracking)]
        if self._hip_libraries or self._amd_cards:  # an AMD host, or HIP seen: say which
            features.append(Feature("hip", Availability.enabled(
                f"probes on AMD's HIP runtime: {', '.join(self._hip_libraries)}")
                if self._hip_libraries else Availability.unavailable(
                    "no process maps AMD's HIP runtime (libamdhip64) now: HIP calls are "
                    "counted once one does", "run a HIP program (PyTorch for ROCm, vLLM)")))
        return (*features,
                Feature("device_labels", devices))

    def collect(self, sink: Sink) -> None:
        if self._engine is None:
            return
        a: CudaActivity = self._engine.read(
            hip_devices.combined(self._nvml_view(sink), self._amd_view(sink)))
        launches = c.GPU_KERNEL_LAUNCH_CALLS
        for launch in a.launches:  # thousands of series: no helper call per launch
            labels: c.LaunchLabels = {
                "cuda_kernel_name": launch.kernel_name,
                "process_executable_name": launch.executable, "cuda_api": launch.api}
            if launch.pid is not None:
                labels["process_pid"] = str(launch.pid)
            launches.emit(sink, launch.count, labels, launch.device)
        for h in a.grid_size:
            grid: c.ExecutableLabels = {"process_executable_name": h.key.executable}
            c.GPU_KERNEL_GRID_SIZE.emit(sink, *_hist(h), _pid(grid, h.key.pid), h.key.device)
        for h in a.block_size:
            block: c.ExecutableLabels = {"process_executable_name": h.key.executable}
            c.GPU_KERNEL_BLOCK_SIZE.emit(sink, *_hist(h), _pid(block, h.key.pid), h.key.device)
        for h in a.kernel_duration_seconds:
            duration: c.KernelDurationLabels = {
                "cuda_kernel_name": h.key.kernel_name, "gpu_measurement_source": "ebpf_model",
                "completion": h.key.completion or "sync_fallback"}
            c.GPU_KERNEL_DURATION.emit(sink, *_hist(h), _pid(duration, h.key.pid), h.key.device)
        for h in a.copies_bytes:
            copy: c.CopyLabels = {"cuda_memcpy_kind": h.key.memcpy_kind,
                                  "process_executable_name": h.key.executable}
            c.GPU_MEMORY_COPIES.emit(sink, *_hist(h), _pid(copy, h.key.pid), h.key.device)
        for h in a.allocations_bytes:
            alloc: c.AllocationLabels = {"process_executable_name": h.key.executable,
                                         "cuda_api": h.key.api,
                                         "cuda_memory_type": h.key.memory_type}
            c.GPU_MEMORY_ALLOCATIONS.emit(sink, *_hist(h), _pid(alloc, h.key.pid), h.key.device)
        for h in a.sync_duration_seconds:
            sync: c.SyncLabels = {"cuda_sync_call": h.key.sync_call}
            c.GPU_SYNC_DURATION.emit(sink, *_hist(h), _pid(sync, h.key.pid), h.key.device)
        for h in a.kernel_elapsed_seconds:
            timed: c.KernelLabels = {"cuda_kernel_name": h.key.kernel_name}
            c.GPU_KERNEL_ELAPSED.emit(sink, *_hist(h), _pid(timed, h.key.pid), h.key.device)
        for w in a.stream_waits:
            waits: c.ExecutableLabels = {"process_executable_name": w.key.executable}
            c.GPU_STREAM_WAITS.emit(sink, w.count, _pid(waits, w.key.pid), w.key.device)
        for h in a.stream_wait_bound_seconds:
            bound: c.ExecutableLabels = {"process_executable_name": h.key.executable}
            c.GPU_STREAM_WAIT_BOUND.emit(sink, *_hist(h), _pid(bound, h.key.pid),
                                         h.key.device)
        for e in a.errors:
            error: c.CudaErrorLabels = {"cuda_call": e.key.call, "error_type": e.key.error_type,
                                        "process_executable_name": e.key.executable}
            c.GPU_CUDA_ERRORS.emit(sink, e.count, _pid(error, e.key.pid), e.key.device)
        for reason, n in sorted(a.dropped.items()):
            c.EBPF_EVENTS_DROPPED.emit(sink, n, {"reason": reason})
        for library in a.attached_libraries:
            c.EBPF_ATTACHED_LIBRARIES.emit(sink, 1, {"library": library})
        self._hip_libraries = tuple(lib for lib in a.attached_libraries
                                    if hip_devices.is_hip_runtime(lib))
        c.EBPF_KERNEL_NAMES_OVERFLOW.emit(sink, a.kernel_names_overflow, {})
        c.EBPF_EXECUTABLES_FOLDED.emit(sink, a.executables_folded, {})

    def _nvml_view(self, sink: Sink) -> NvmlView | None:
        """NVML's process lists this scrape (the scrape's one read of them, shared with
        the processes collector); None without NVML, incomplete when a list could not be
        read whole (no device is judged this scrape then)."""
        if self._nvml is None:
            return None
        try:
            lists = sink.inputs.nvml_processes(self._nvml, sink.deadline)
        except (NvmlUnavailable, StackBusy) as exc:
            self._nvml_problem = exc
            return None
        except TimeoutError:  # another collector's round passed the deadline
            self._nvml_problem = None
            return NvmlView({}, False, {})
        self._nvml_problem = None
        devices_of: dict[int, set[str]] = defaultdict(set)
        complete = len(lists.results) == len(lists.devices)
        for result, error in lists.results.values():
            if result is None or error is not None or not result.complete:
                complete = False
                continue
            for p in result.processes:
                devices_of[p.pid].add(p.device)
        by_pci = {d.identity.pci_address: d.identity.key for d in lists.devices.values()
                  if d.identity.pci_address}
        return NvmlView({pid: frozenset(d) for pid, d in devices_of.items()}, complete, by_pci)

    def _amd_view(self, sink: Sink) -> NvmlView | None:
        """The AMD GPUs each process has open, from DRM fdinfo (HIP calls' device, see
        sources/ebpf/hip_devices.py); None on a host without an amdgpu card, incomplete
        when the walk passed the scrape deadline (no device is judged this scrape)."""
        self._amd_cards = hip_devices.amd_cards(self.settings.sysfs)
        if not self._amd_cards:
            return None
        try:
            return hip_devices.amd_view(
                sink.inputs.drm_clients(self.settings.procfs, sink.deadline))
        except TimeoutError as exc:
            sink.fail("fdinfo", str(exc))
            return NvmlView({}, False, {})

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        if self._nvml is not None:
            nvml_stack.detach(self._nvml)
            self._nvml = None



_L = TypeVar("_L", bound=c.CudaLabels)


def _pid(labels: _L, pid: int | None) -> _L:
    """process_pid on a CUDA family's series (--ebpf.pid-label: the engine keeps pids)."""
    if pid is not None:
        labels["process_pid"] = str(pid)
    return labels


def _hist(h: CallHistogram) -> tuple[Buckets, float]:
    return h.histogram.buckets, h.histogram.sum
