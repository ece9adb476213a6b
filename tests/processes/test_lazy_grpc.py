"""grpc and protobuf (about 14 MiB resident) are loaded only once a kubelet socket
exists: a host that is not a Kubernetes node never pays for them, and a kubelet that
starts after the exporter is still used."""

from __future__ import annotations

from pathlib import Path

from tests.fake_nvml import scenario as fake
from tests.helpers import parse, value
from tests.processes.kubelet import kubelet
from tests.processes.test_processes import PODS, procs, running, scenario, write_procs


def _grpc_loaded(pid: int) -> bool:
    # grpc's core is one extension module (cygrpc); protobuf's is _upb.
    maps = Path(f"/proc/{pid}/maps").read_text()
    return "cygrpc" in maps or "_upb" in maps


def test_grpc_is_loaded_only_once_the_kubelet_socket_exists(tmp_path: Path) -> None:
    lib = fake.build(tmp_path / "fake-nvml")
    write_procs(tmp_path / "proc")
    sock = tmp_path / "kubelet.sock"
    with running(lib, tmp_path, scenario(), [f"--processes.kubelet-socket={sock}"]) as exp:
        before = parse(exp.scrape())
        # Not in a pod, no socket: not a Kubernetes node.
        assert value(before, "gpu_exporter_feature_status", feature="processes.kubelet",
                     state="disabled") == 1
        assert not _grpc_loaded(exp.proc.pid)

        with kubelet(sock, PODS):
            after = parse(exp.scrape())
        assert _grpc_loaded(exp.proc.pid)
    assert value(after, "gpu_exporter_collector_success", collector="processes") == 1
    assert procs(after, process_pid="1001")[0].labels["k8s_pod_name"] == "train-0"
