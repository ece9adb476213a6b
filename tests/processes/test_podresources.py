"""The PodResources client against a real gRPC server speaking the kubelet's v1 proto."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gpu_exporter.readers.kubelet.podresources import (
    ContainerRef,
    PodResourcesClient,
    PodResourcesError,
    normalise_device_id,
    socket_problem,
)
from tests.processes.kubelet import Container, Pod, kubelet

UUID0 = "GPU-00000000-1111-2222-3333-444455556600"
UUID1 = "GPU-00000001-1111-2222-3333-444455556601"
MIG = "MIG-00000001-aaaa-bbbb-cccc-ddddeeeeff01"

PODS = [
    Pod("ml", "train-0", [
        Container("trainer", {"nvidia.com/gpu": [UUID0]}, cpu_ids=[2, 3]),
        Container("sidecar", {"example.com/nic": ["nic-7"]}),
    ]),
    # Time-slicing: replicas of one GPU handed to two pods.
    Pod("serving", "infer-a", [Container("server", {"nvidia.com/gpu": [UUID1 + "::0"]})]),
    Pod("serving", "infer-b", [Container("server", {"nvidia.com/gpu": [UUID1 + "::3"]})]),
    Pod("ml", "mig-job", [Container("main", {"nvidia.com/mig-1g.5gb": [MIG]})]),
    Pod("rocm", "amd-job", [Container("main", {"amd.com/gpu": ["0000:C3:00.0", "04:00.0"]})]),
    Pod("kube-system", "no-devices", [Container("pause")]),
]


def test_list_maps_gpus_to_containers(tmp_path: Path) -> None:
    sock = tmp_path / "kubelet.sock"
    with kubelet(sock, PODS) as server:
        assert socket_problem(str(sock)) is None
        client = PodResourcesClient(str(sock))
        try:
            gpus = client.list_gpus(timeout=5).by_device
            client.list_gpus(timeout=5)  # the channel is reused
        finally:
            client.close()
    assert server.calls == 2
    assert dict(gpus) == {
        UUID0: (ContainerRef("ml", "train-0", "trainer"),),
        UUID1: (ContainerRef("serving", "infer-a", "server"),
                ContainerRef("serving", "infer-b", "server")),
        MIG: (ContainerRef("ml", "mig-job", "main"),),
        "0000:c3:00.0": (ContainerRef("rocm", "amd-job", "main"),),
        "0000:04:00.0": (ContainerRef("rocm", "amd-job", "main"),),
    }


def test_a_kubelet_that_stops_answering_is_an_error_not_a_hang(tmp_path: Path) -> None:
    sock = tmp_path / "kubelet.sock"
    client = PodResourcesClient(str(sock))
    with kubelet(sock, PODS):
        assert client.list_gpus(timeout=5).by_device
    with pytest.raises(PodResourcesError, match="UNAVAILABLE"):
        client.list_gpus(timeout=2)
    # A kubelet that comes back is picked up again on the next call.
    with kubelet(sock, PODS[:1]):
        assert list(client.list_gpus(timeout=5).by_device) == [UUID0]
    client.close()


def test_socket_problems_say_what_to_do(tmp_path: Path) -> None:
    missing = socket_problem(str(tmp_path / "nope"))
    assert missing is not None and "no kubelet PodResources socket" in missing.reason
    assert "/var/lib/kubelet/pod-resources" in missing.fix
    (tmp_path / "file").write_text("")
    not_socket = socket_problem(str(tmp_path / "file"))
    assert not_socket is not None and "is not a socket" in not_socket.reason
    assert "--processes.kubelet-socket" in not_socket.fix
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "s.sock"))
        assert socket_problem(str(tmp_path / "s.sock")) is None


@pytest.mark.parametrize(("raw", "expected"), [
    (UUID0, UUID0),
    (UUID0 + "::12", UUID0),
    ("0000:3B:00.0", "0000:3b:00.0"),
    ("3b:00.0", "0000:3b:00.0"),
    ("00000000:3B:00.0", "0000:3b:00.0"),
    ("card0-1", "card0-1"),
])
def test_normalise_device_id(raw: str, expected: str) -> None:
    assert normalise_device_id(raw) == expected
