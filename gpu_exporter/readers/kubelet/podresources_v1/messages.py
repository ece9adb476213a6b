"""The parts of the PodResources messages the exporter reads, typed.

The generated module (api_pb2.py, `make podresources-stubs`) builds its message classes
at import time, so mypy cannot see them: these protocols say what `List` returns, and a
test checks each field named here against the message descriptors of api.proto.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class ContainerDevices(Protocol):
    resource_name: str
    device_ids: Sequence[str]


class CDIDevice(Protocol):
    name: str  # fully qualified: vendor/class=name


class ClaimResource(Protocol):
    cdi_devices: Sequence[CDIDevice]
    driver_name: str
    pool_name: str
    device_name: str


class DynamicResource(Protocol):
    """A DRA ResourceClaim's devices in a container (kubelet 1.34+, feature gate
    KubeletPodResourcesDynamicResources; empty from older kubelets)."""

    claim_name: str
    claim_namespace: str
    claim_resources: Sequence[ClaimResource]


class ContainerResources(Protocol):
    name: str
    devices: Sequence[ContainerDevices]
    dynamic_resources: Sequence[DynamicResource]


class PodResources(Protocol):
    name: str
    namespace: str
    containers: Sequence[ContainerResources]


class ListPodResourcesResponse(Protocol):
    pod_resources: Sequence[PodResources]
