"""CUDA activity from eBPF uprobes on libcudart / libcuda: launches by kernel name,
copies, allocations, synchronisations (see docs/ebpf.md)."""

from __future__ import annotations

import logging
import os
import platform
from collections.abc import Sequence
from typing import Any, ClassVar

from gpu_exporter import catalogue as c
from gpu_exporter import flagtypes
from gpu_exporter.collectors.base import Availability, Collector, CollectorFault, Sink
from gpu_exporter.ebpf.reading import CudaActivity, LabelledHistogram
from gpu_exporter.settings import Option

log = logging.getLogger("gpu_exporter.collectors.ebpf")

# Capability bits (linux/capability.h).
CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39


def effective_capabilities(procfs: str = "/proc") -> int | None:
    try:
        with open(f"{procfs}/self/status") as f:
            for line in f:
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
PID_LABEL = Option(
    "ebpf.pid-label", bool, False,
    "Add process_pid to the CUDA activity families (one series per process).", is_flag=True)
RESCAN_INTERVAL = Option(
    "ebpf.rescan-interval", flagtypes.Seconds(0.1, 3600), 10.0,
    "Seconds between scans of /proc/*/maps for newly mapped CUDA libraries.")


class EbpfCollector(Collector):
    name: ClassVar[str] = "ebpf"
    help: ClassVar[str] = ("CUDA kernel launches, copies, allocations and synchronisations "
                           "from uprobes on libcudart/libcuda (root, Linux; also "
                           "OTEL_GPU_EBPF_ENABLED=true).")
    default_enabled: ClassVar[bool] = False
    options: ClassVar[Sequence[Option[Any]]] = (NAMES_MAX, PID_LABEL, RESCAN_INTERVAL)

    _engine: Any = None

    def start(self) -> Availability:
        if self._engine is not None:
            return Availability.enabled()
        if platform.system() != "Linux":
            return Availability.unavailable(f"eBPF needs Linux, this is {platform.system()}")
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
        from gpu_exporter.ebpf.probes import Engine, LoadError

        engine = Engine(
            self.settings.procfs,
            names_max=self.settings.get(NAMES_MAX),
            pid_label=self.settings.get(PID_LABEL),
            rescan_interval=self.settings.get(RESCAN_INTERVAL),
        )
        try:
            engine.start(bcc)
        except LoadError as exc:
            raise CollectorFault(str(exc)) from exc
        self._engine = engine
        return Availability.enabled()

    def collect(self, sink: Sink) -> None:
        if self._engine is None:
            return
        a: CudaActivity = self._engine.read()
        pid_label = self.settings.get(PID_LABEL)
        for launch in a.launches:
            labels = {"cuda_kernel_name": launch.kernel_name,
                      "process_executable_name": launch.executable, "cuda_api": launch.api}
            if pid_label and launch.pid is not None:
                labels["process_pid"] = str(launch.pid)
            sink.add(c.GPU_KERNEL_LAUNCH_CALLS, labels, launch.count)
        for metric, hists in (
            (c.GPU_KERNEL_GRID_SIZE, a.grid_size),
            (c.GPU_KERNEL_BLOCK_SIZE, a.block_size),
            (c.GPU_KERNEL_DURATION, a.kernel_duration_seconds),
            (c.GPU_MEMORY_COPIES, a.copies_bytes),
            (c.GPU_MEMORY_ALLOCATIONS, a.allocations_bytes),
            (c.GPU_SYNC_DURATION, a.sync_duration_seconds),
        ):
            _histograms(sink, metric, hists)
        for reason, n in sorted(a.dropped.items()):
            sink.add(c.EBPF_EVENTS_DROPPED, {"reason": reason}, n)
        for library in a.attached_libraries:
            sink.add(c.EBPF_ATTACHED_LIBRARIES, {"library": library}, 1)
        sink.add(c.EBPF_KERNEL_NAMES_OVERFLOW, {}, a.kernel_names_overflow)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None


def _histograms(sink: Sink, metric: c.Metric, hists: Sequence[LabelledHistogram]) -> None:
    for h in hists:
        sink.add_histogram(metric, h.labels, h.histogram.buckets, h.histogram.sum)
