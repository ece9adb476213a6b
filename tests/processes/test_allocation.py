"""k8s_gpu_allocation_info end to end: the real exporter, the fake NVML, a real gRPC
PodResources server, and the node's pod log directories and pod cgroups as fixture trees.
The kubelet still lists a finished pod with the GPU it held (kubernetes#119423) while the
same GPU already serves a new pod: only the new pod holds it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from gpu_exporter.collectors import REGISTRY
from tests.fake_nvml import scenario as fake
from tests.helpers import Series, exporter, find, parse, promtool_check_metrics, value
from tests.processes.kubelet import Container, Pod, kubelet
from tests.processes.podtree import pod_cgroup, pod_log_dir

UID_TRAIN = "a0000000-0000-4000-8000-000000000001"
UID_DONE = "a0000000-0000-4000-8000-000000000002"
UID_NEXT = "a0000000-0000-4000-8000-000000000003"


def uuid(i: int) -> str:
    return fake.h100(i).uuid


PODS = [
    Pod("ml", "train-0", [Container("trainer", {"nvidia.com/gpu": [uuid(0)]})]),
    # finished (Succeeded) an hour ago, not deleted: the kubelet still lists its GPU ...
    Pod("batch", "job-a-x7k2p", [Container("main", {"nvidia.com/gpu": [uuid(1)]})]),
    # ... which the device manager has given to the next pod.
    Pod("batch", "job-b-q9w4r", [Container("main", {"nvidia.com/gpu": [uuid(1)]})]),
    # a GPU of another kind of device plugin resource is not a GPU
    Pod("net", "router", [Container("r", {"example.com/nic": ["nic-0"]})]),
]


def _node(tmp: Path) -> tuple[Path, Path]:
    logs, sysfs = tmp / "var-log-pods", tmp / "sys"
    for ns, name, uid, running in (("ml", "train-0", UID_TRAIN, True),
                                   ("batch", "job-a-x7k2p", UID_DONE, False),
                                   ("batch", "job-b-q9w4r", UID_NEXT, True)):
        pod_log_dir(logs, ns, name, uid)
        pod_cgroup(sysfs, "v2-systemd", uid, running=running)
    (sysfs / "class" / "drm").mkdir(parents=True)
    return logs, sysfs


def _scrape(lib: Path, tmp: Path, args: Sequence[str]) -> list[Series]:
    sc = fake.Scenario(devices=[fake.h100(i) for i in range(3)])
    path = sc.write(tmp / "gpus.scenario")
    sock = tmp / "kubelet.sock"
    keep = {"nvidia", "processes"}
    flags = [*(f"--no-collector.{c.name}" for c in REGISTRY if c.name not in keep),
             "--collector.nvidia", "--collector.processes",
             f"--processes.kubelet-socket={sock}", f"--path.procfs={tmp / 'proc'}", *args]
    (tmp / "proc").mkdir(exist_ok=True)
    with kubelet(sock, PODS), exporter(flags, env=fake.env(lib, path)) as exp:
        text = exp.scrape()
    promtool_check_metrics(text)
    return parse(text)


def _allocations(series: list[Series]) -> set[tuple[str, str, str, str]]:
    return {(s.labels["hw_id"], s.labels["k8s_namespace_name"], s.labels["k8s_pod_name"],
             s.labels["k8s_container_name"])
            for s in find(series, "k8s_gpu_allocation_info") if s.value == 1}


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fake.build(tmp_path_factory.mktemp("fake-nvml"))


def test_a_finished_pod_still_listed_by_the_kubelet_holds_no_gpu(lib: Path,
                                                                 tmp_path: Path) -> None:
    logs, sysfs = _node(tmp_path)
    s = _scrape(lib, tmp_path, [f"--processes.pod-log-dir={logs}", f"--path.sysfs={sysfs}"])
    assert _allocations(s) == {(uuid(0), "ml", "train-0", "trainer"),
                               (uuid(1), "batch", "job-b-q9w4r", "main")}
    # with the device labels, whether or not anything runs on it (nothing does here)
    (train,) = find(s, "k8s_gpu_allocation_info", hw_id=uuid(0))
    assert train.labels.items() >= {"gpu_index": "0", "hw_name": fake.H100_NAME,
                                    "hw_vendor": "nvidia"}.items()
    assert not find(s, "process_gpu_memory_usage_bytes")
    assert value(s, "gpu_exporter_feature_status", feature="processes.pod_liveness",
                 state="enabled") == 1


def test_without_the_node_s_pod_directories_the_kubelet_s_list_is_taken_as_is(
    lib: Path, tmp_path: Path
) -> None:
    _, sysfs = _node(tmp_path)
    missing = tmp_path / "no-such-dir"
    s = _scrape(lib, tmp_path, [f"--processes.pod-log-dir={missing}", f"--path.sysfs={sysfs}"])
    assert (uuid(1), "batch", "job-a-x7k2p", "main") in _allocations(s)
    assert len(_allocations(s)) == 3
    assert value(s, "gpu_exporter_feature_status", feature="processes.pod_liveness",
                 state="unavailable") == 1
    assert value(s, "gpu_exporter_collector_success", collector="processes") == 1
