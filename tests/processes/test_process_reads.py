"""NVML's process lists are read once a scrape, in one round of the NVML stack's lanes,
for every collector that needs them: the processes collector (memory and utilization
per process) and the eBPF collector (the device of each CUDA call) in one scrape cost
one compute-list and one graphics-list call per GPU. A GPU hung in a process call costs
only itself, in both collectors: its processes are absent, the others' are reported, and
the GPU is not asked again while its call has not returned."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client.core import Metric

from gpu_exporter.collectors import REGISTRY
from gpu_exporter.collectors.base import Availability
from gpu_exporter.collectors.ebpf import EbpfCollector
from gpu_exporter.model.settings import Settings
from gpu_exporter.scrape.exporter import GpuExporterCollector
from gpu_exporter.sources.ebpf.reading import CudaActivity, NvmlView
from gpu_exporter.sources.nvml import stack as nvml_stack
from tests.bench import fleet
from tests.bench.floor import Recording, recording_nvml
from tests.fake_nvml import scenario as fake
from tests.helpers import eventually
from tests.sysfs.tree import FakeSysfs

GPUS = 3
LIST_CALLS = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses")


class ViewingSource(fleet.RecordedActivity):
    """The eBPF collector's source of CUDA activity, keeping the NVML view each scrape
    hands it (which GPU each pid is on)."""

    def __init__(self) -> None:
        super().__init__(fleet.cuda_activity(0))
        self.views: list[NvmlView | None] = []

    def read(self, nvml: object = None) -> CudaActivity:
        assert nvml is None or isinstance(nvml, NvmlView)
        self.views.append(nvml)
        return self.activity


SOURCE = ViewingSource()


class ViewingEbpf(EbpfCollector):
    """The eBPF collector with `SOURCE` in place of its probes, judging devices by NVML's
    process lists as it does with probes (a source alone attaches no NVML stack)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, source=SOURCE)

    def start(self) -> Availability:
        state = super().start()
        self._nvml = nvml_stack.attach(self.settings)
        return state


@contextmanager
def node(tmp_path: Path, timeout: float = 10.0,
         names: frozenset[str] = frozenset({"nvidia", "processes", "ebpf"}),
         ) -> Iterator[tuple[fake.Scenario, GpuExporterCollector]]:
    sc = fleet.scenario(GPUS, processes=2 * GPUS)  # pid 100000 + p on GPU p % GPUS
    now = int(time.time() * 1_000_000)  # NVML stamps samples with the host's clock (µs)
    for p in range(2 * GPUS):
        sc.devices[p % GPUS].process_utilization.append((100000 + p, now - 3_000_000,
                                                         50, 0, 0, 0))
    fake.load_in_process(sc.write(tmp_path / "node.scenario"))
    sysfs = tmp_path / "sysfs"
    sysfs.mkdir(exist_ok=True)  # a test may have put cards there
    settings = Settings(sysfs=str(sysfs), scrape_timeout_seconds=timeout,
                        enabled_collectors=names,
                        options={o.name: o.default for cls in REGISTRY for o in cls.options})
    SOURCE.views.clear()
    exporter = GpuExporterCollector(
        settings, [ViewingEbpf if cls is EbpfCollector else cls for cls in REGISTRY])
    try:
        states = exporter.start()
        assert {n: states[n].state for n in names} == dict.fromkeys(names, "enabled")
        yield sc, exporter
    finally:
        exporter.close()


def list_calls(rec: Recording) -> dict[str, int]:
    """Process-list calls by list (whatever version of the function answered)."""
    out = dict.fromkeys(LIST_CALLS, 0)
    for name, n in rec.by_function().items():
        for fn in LIST_CALLS:
            if name.startswith(fn):
                out[fn] += n
    return out


def process_pids(families: list[Metric]) -> set[int]:
    return {int(s.labels["process_pid"]) for f in families
            if f.name == "process_gpu_memory_usage_bytes" for s in f.samples}


def success(families: list[Metric]) -> dict[str, float]:
    return {s.labels["collector"]: s.value for f in families
            if f.name == "gpu_exporter_collector_success" for s in f.samples}


def test_the_processes_and_ebpf_collectors_read_each_gpus_lists_once_a_scrape(
    tmp_path: Path,
) -> None:
    first = True
    with node(tmp_path) as (sc, exporter):
        for _ in range(3):
            with recording_nvml() as rec:
                families = list(exporter.collect())
            assert list_calls(rec) == dict.fromkeys(LIST_CALLS, GPUS)
            assert success(families) == {"nvidia": 1, "processes": 1, "ebpf": 1}
            assert process_pids(families) == {100000 + p for p in range(2 * GPUS)}
            view = SOURCE.views[-1]
            assert view is not None and view.complete
            assert view.devices_of == {100000 + p: frozenset({sc.devices[p % GPUS].uuid})
                                       for p in range(2 * GPUS)}
            # the processes collector's utilization samples, read in the same round
            assert rec.by_function().get("nvmlDeviceGetProcessUtilization") == GPUS
            if first:
                assert {s.labels["process_pid"] for f in families
                        if f.name == "process_gpu_utilization_ratio" for s in f.samples
                        if s.labels["hw_gpu_task"] == "general" and s.value == 0.5
                        } == {str(100000 + p) for p in range(2 * GPUS)}
            first = False


def test_a_gpu_hung_in_a_process_call_costs_only_itself_in_both_collectors(
    tmp_path: Path,
) -> None:
    hung = 1
    others = {100000 + p for p in range(2 * GPUS) if p % GPUS != hung}
    with node(tmp_path, timeout=1.0) as (sc, exporter):
        sc.hang(hung, "nvmlDeviceGetComputeRunningProcesses_v3", 3.0)
        with recording_nvml() as rec:
            families = list(exporter.collect())
        assert process_pids(families) == others
        assert success(families) == {"nvidia": 1, "processes": 0, "ebpf": 1}
        view = SOURCE.views[-1]
        assert view is not None and not view.complete  # no device judged this scrape
        assert list_calls(rec)[LIST_CALLS[0]] == GPUS  # the hung call is one of them
        # While its call has not returned, the GPU is not asked again, by either.
        with recording_nvml() as rec:
            families = list(exporter.collect())
        assert process_pids(families) == others
        assert list_calls(rec) == dict.fromkeys(LIST_CALLS, GPUS - 1)
        sc.hang(hung, "nvmlDeviceGetComputeRunningProcesses_v3", None)

        def back() -> list[Metric]:
            families = list(exporter.collect())
            return families if len(process_pids(families)) == 2 * GPUS else []

        families = eventually(back, 10, "the hung GPU's processes back", interval=0.2)
        assert success(families)["processes"] == 1
        view = SOURCE.views[-1]
        assert view is not None and view.complete


def test_the_ebpf_collector_alone_reads_the_lists_once_and_no_utilization(
    tmp_path: Path,
) -> None:
    """Without the processes collector nobody samples utilization: the round reads the
    lists only."""
    with node(tmp_path, names=frozenset({"nvidia", "ebpf"})) as (_, exporter):
        for _ in range(2):
            with recording_nvml() as rec:
                families = list(exporter.collect())
            assert list_calls(rec) == dict.fromkeys(LIST_CALLS, GPUS)
            assert "nvmlDeviceGetProcessUtilization" not in rec.by_function()
            assert success(families) == {"nvidia": 1, "ebpf": 1}
            view = SOURCE.views[-1]
            assert view is not None and view.complete
            assert set(view.devices_of) == {100000 + p for p in range(2 * GPUS)}


def test_nvidia_and_processes_run_on_the_scrapes_thread_while_nvml_is_steady(
    tmp_path: Path,
) -> None:
    """With a live NVML session, every NVML call of the nvidia and processes collectors
    runs in lanes with a deadline: neither is guarded, and the scrape's own thread runs
    one of them (the hand-offs of a 1 Hz scrape, issue #34). Once NVML is lost, its start
    (nvmlInit, which hangs on a GPU that fell off the bus) is due on the collector's
    thread: both are guarded again. A DRM card's fdinfo (a driver's lock) guards the
    processes collector."""
    with node(tmp_path, names=frozenset({"nvidia", "processes"})) as (_, exporter):
        list(exporter.collect())
        nvidia, processes = exporter.collectors["nvidia"], exporter.collectors["processes"]
        assert not nvidia.guarded() and not processes.guarded()
        stack = nvidia._stack  # type: ignore[attr-defined]
        assert stack is not None and stack is processes._nvml  # type: ignore[attr-defined]
        from gpu_exporter.sources.nvml.calls import NvmlGone

        assert stack.lost(stack.current, NvmlGone("driver unloaded"))
        assert nvidia.guarded() and processes.guarded()
    # The same node with an AMD card besides: the processes collector walks DRM fdinfo.
    amd = tmp_path / "amd"
    FakeSysfs(amd / "sysfs").add("rx6900xt", "0000:03:00.0", 0)
    with node(amd, names=frozenset({"nvidia", "processes"})) as (_, exporter):
        list(exporter.collect())
        assert not exporter.collectors["nvidia"].guarded()
        assert exporter.collectors["processes"].guarded()
