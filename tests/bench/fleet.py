"""The fake node every benchmark measures: N fake H100s behind the fake NVML library,
a given number of GPU processes spread over them, and a per-call NVML delay."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from prometheus_client.registry import CollectorRegistry

from gpu_exporter.collectors import REGISTRY
from gpu_exporter.collectors.ebpf import EbpfCollector
from gpu_exporter.collectors.processes import MAX_PER_GPU_OPTION
from gpu_exporter.model.settings import Settings
from gpu_exporter.scrape.exporter import GpuExporterCollector, make_registry
from gpu_exporter.sources.ebpf.reading import CudaActivity, Launches
from tests.fake_nvml import scenario as fake
from tests.fake_nvml.scenario import load_in_process

GIB = 1024**3


def scenario(gpus: int, processes: int = 200, call_delay_us: int = 0,
             pids: Sequence[int] = ()) -> fake.Scenario:
    """`gpus` H100s with `processes` compute processes spread over them: pids from
    100,000 on (no /proc entry: their facts are never read), or `pids` (real processes,
    whose comm, cgroup and stat the exporter reads as a node's)."""
    devices = []
    for i in range(gpus):
        d = fake.h100(i)
        # h100() repeats 8 bus numbers; a node of 64 needs 64 distinct PCI addresses.
        d.pci_bus_id = f"00000000:{i + 1:02X}:00.0"
        d.uuid = f"GPU-{i:08x}-1111-2222-3333-444455556666"
        devices.append(d)
    for p in range(processes):
        dev = devices[p % gpus]
        pid = pids[p] if pids else 100_000 + p
        dev.processes.append(("compute", pid, (p % 40 + 1) * GIB // 4, None, None))
    return fake.Scenario(devices=devices, call_delay_us=call_delay_us)


# The collectors a scrape of this node runs in process: the NVML device reader and the
# per-process reader (which also asks NVML). Host metrics (/proc) are no part of the
# NVML floor, so the host collector is left out here; the footprint benchmark runs the
# real process with its default collectors.
IN_PROCESS_COLLECTORS = frozenset({"nvidia", "processes"})


# What the eBPF collector's map-reading layer (`Engine.read()`) hands its render path:
# kernel-name series come as a typed record. Benchmarks without root probes feed the
# collector's real collect() with such a record; the BPF map lookups themselves are the
# eBPF area's benchmark (tests/bench/test_ebpf_overhead.py).
EXECUTABLES = ("python3", "torchrun", "trainer", "nccl-tests")


def cuda_activity(series: int) -> CudaActivity:
    """`series` launch series: kernel names (within the default 500-name cap) times
    executables, as a training node shows them."""
    launches = [
        Launches(f"ampere_sgemm_128x64_nn_{i // len(EXECUTABLES)}",
                 EXECUTABLES[i % len(EXECUTABLES)], "runtime", None, 1000 + i)
        for i in range(series)
    ]
    return CudaActivity(launches=launches, grid_size=(), block_size=(),
                        kernel_duration_seconds=(), copies_bytes=(), allocations_bytes=(),
                        sync_duration_seconds=(), errors=(), dropped={},
                        attached_libraries=(), kernel_names_overflow=0)


class RecordedActivity:
    """A source of CUDA activity passed to the eBPF collector in place of its probe
    engine: read() returns one CudaActivity record (the engine's output type), close()
    has nothing to detach."""

    # What the collector's feature states read off its engine: probes on a kernel that
    # detaches them in bulk, processes tracked as they exec.
    mechanism = "uprobe_multi"
    wanted_mechanism = "auto"
    mechanism_problem: str | None = None
    tracking_problem: str | None = None

    def __init__(self, activity: CudaActivity) -> None:
        self.activity = activity

    def read(self, nvml: object = None) -> CudaActivity:
        return self.activity

    def close(self) -> None:
        pass


def ebpf_reading(activity: CudaActivity) -> type[EbpfCollector]:
    """The eBPF collector with `activity` passed in as its source (no probes)."""

    class RecordedEbpf(EbpfCollector):
        def __init__(self, settings: Settings) -> None:
            super().__init__(settings, source=RecordedActivity(activity))

    return RecordedEbpf


@contextmanager
def in_process(sc: fake.Scenario, tmp: Path, kernel_series: int = 0,
               ) -> Iterator[tuple[GpuExporterCollector, CollectorRegistry]]:
    path = sc.write(tmp / "node.scenario")
    load_in_process(path)
    empty_sysfs = tmp / "sysfs"
    empty_sysfs.mkdir(exist_ok=True)
    collectors = IN_PROCESS_COLLECTORS | ({"ebpf"} if kernel_series else set())
    settings = Settings(
        sysfs=str(empty_sysfs),
        scrape_timeout_seconds=30.0,
        enabled_collectors=frozenset(collectors),
        # Every process its own series, as before the cap (default 16 a GPU): the
        # benchmarks scale with processes, and compare with runs from before it.
        options={**{o.name: o.default for cls in REGISTRY for o in cls.options},
                 MAX_PER_GPU_OPTION.name: 10_000},
    )
    classes = [ebpf_reading(cuda_activity(kernel_series))
               if cls is EbpfCollector and kernel_series else cls for cls in REGISTRY]
    exporter = GpuExporterCollector(settings, classes)
    try:
        states = exporter.start()
        for name in collectors:
            assert states[name].state == "enabled", (name, states[name])
        gc.freeze()  # as `gpu-exporter serve` does after start-up
        yield exporter, make_registry(exporter)
    finally:
        gc.unfreeze()
        exporter.close()
