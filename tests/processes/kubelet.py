"""A real gRPC PodResources `v1` server (the kubelet's proto) on a unix socket, serving
the pods a test sets: the exporter talks to it exactly as it talks to a kubelet."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from gpu_exporter.readers.kubelet.podresources import LIST_METHOD
from gpu_exporter.readers.kubelet.podresources_v1 import api_pb2


@dataclass(frozen=True)
class Claim:
    """A DRA ResourceClaim's devices in a container, as a 1.34 kubelet reports them."""

    namespace: str
    name: str
    driver: str
    cdi_devices: tuple[str, ...]  # fully qualified CDI names
    pool: str = ""
    device: str = ""


@dataclass
class Container:
    name: str
    devices: dict[str, list[str]] = field(default_factory=dict)  # resource -> device ids
    cpu_ids: list[int] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)


@dataclass
class Pod:
    namespace: str
    name: str
    containers: list[Container]


class FakeKubelet:
    def __init__(self, pods: Sequence[Pod]) -> None:
        self.pods = list(pods)
        self.calls = 0
        self._lock = threading.Lock()

    def List(self, request: Any, context: Any) -> Any:  # the gRPC method name
        with self._lock:
            self.calls += 1
            pods = list(self.pods)
        return api_pb2.ListPodResourcesResponse(pod_resources=[
            api_pb2.PodResources(
                name=p.name, namespace=p.namespace,
                containers=[
                    api_pb2.ContainerResources(
                        name=c.name, cpu_ids=c.cpu_ids,
                        devices=[api_pb2.ContainerDevices(resource_name=r, device_ids=ids)
                                 for r, ids in c.devices.items()],
                        dynamic_resources=[api_pb2.DynamicResource(
                            claim_name=cl.name, claim_namespace=cl.namespace,
                            claim_resources=[api_pb2.ClaimResource(
                                cdi_devices=[api_pb2.CDIDevice(name=n)
                                             for n in cl.cdi_devices],
                                driver_name=cl.driver, pool_name=cl.pool,
                                device_name=cl.device)])
                            for cl in c.claims],
                    ) for c in p.containers
                ],
            ) for p in pods
        ])


@contextmanager
def kubelet(socket_path: Path, pods: Sequence[Pod]) -> Iterator[FakeKubelet]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = FakeKubelet(pods)
    service, method = LIST_METHOD.strip("/").split("/")
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, {
        method: grpc.unary_unary_rpc_method_handler(
            servicer.List,
            request_deserializer=api_pb2.ListPodResourcesRequest.FromString,
            response_serializer=api_pb2.ListPodResourcesResponse.SerializeToString),
    }),))
    assert server.add_insecure_port(f"unix://{socket_path}") != 0 or socket_path.exists()
    server.start()
    try:
        yield servicer
    finally:
        server.stop(grace=None).wait()
