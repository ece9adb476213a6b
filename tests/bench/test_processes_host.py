"""Benchmark: one collect() of the processes collector (8 fake H100s, 200 GPU processes,
every one resolved in a /proc tree to a Kubernetes container, PodResources served by a
real gRPC server) and of the host collector, in process. Measured, not asserted."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gpu_exporter.collectors import REGISTRY
from gpu_exporter.collectors.base import Sink
from gpu_exporter.collectors.host import HostCollector
from gpu_exporter.collectors.processes import ProcessesCollector
from gpu_exporter.model import catalogue as c
from gpu_exporter.model.settings import Settings
from tests.bench import fleet
from tests.bench.conftest import Results
from tests.fake_nvml import scenario as fake
from tests.processes.kubelet import Container, Pod, kubelet
from tests.processes.procfs import write_process

PROCESSES = 200
UID = "11111111-2222-4333-8444-555555555555"


def _settings(tmp: Path, **kw: Any) -> Settings:
    opts = {o.name: o.default for cls in REGISTRY for o in cls.options}
    opts.update(kw)
    (tmp / "sys").mkdir(exist_ok=True)
    return Settings(sysfs=str(tmp / "sys"), procfs=str(tmp / "proc"), options=opts)


def _collect(collector: Any, name: str) -> Sink:
    sink = Sink(name, time.monotonic() + 30)
    collector.collect(sink)
    return sink


def test_processes_collect(benchmark: Any, results: Results, tmp_path: Path) -> None:
    sc = fleet.scenario(8, PROCESSES)
    fake.load_in_process(sc.write(tmp_path / "node.scenario"))
    cgroup = (f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/"
              f"cri-containerd-{'a1' * 32}.scope\n")
    for p in range(PROCESSES):
        write_process(tmp_path / "proc", 100_000 + p, comm="python3", cgroup=cgroup,
                      start=p + 1)
    sock = tmp_path / "kubelet.sock"
    pods = [Pod("ml", "train", [Container("main", {"nvidia.com/gpu": [d.uuid]})])
            for d in sc.devices]
    with kubelet(sock, pods):
        collector = ProcessesCollector(_settings(
            tmp_path, **{"processes.kubelet-socket": str(sock)}))
        collector.start()
        try:
            sink = benchmark(_collect, collector, "processes")
        finally:
            collector.close()
    memory = sink.scalars[c.PROCESS_GPU_MEMORY_USAGE]
    assert len(memory) == PROCESSES and not sink.failures
    assert all(labels.get("k8s_pod_name") == "train" for labels, _, _ in memory)
    st = benchmark.stats.stats
    results.put("processes_collect", f"8gpu-{PROCESSES}proc", {
        "median_ms": st.median * 1e3, "min_ms": st.min * 1e3, "max_ms": st.max * 1e3,
        "rounds": st.rounds,
    })


def test_host_collect(benchmark: Any, results: Results, tmp_path: Path) -> None:
    collector = HostCollector(Settings(options={
        o.name: o.default for o in HostCollector.options}))
    collector.start()
    try:
        sink = benchmark(_collect, collector, "host")
    finally:
        collector.close()
    series = sum(len(s) for s in sink.scalars.values())
    assert series and not sink.failures
    st = benchmark.stats.stats
    results.put("host_collect", "this-host", {
        "median_ms": st.median * 1e3, "min_ms": st.min * 1e3, "max_ms": st.max * 1e3,
        "rounds": st.rounds, "series": series,
    })
