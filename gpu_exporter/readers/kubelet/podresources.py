"""Which Kubernetes pod and container each GPU is allocated to: the kubelet's PodResources
`v1` gRPC API (`List`) over its unix socket.

Device ids are what the device plugins hand the kubelet: `nvidia.com/gpu` and
`nvidia.com/mig-*` give GPU/MIG UUIDs (time-sliced replicas append `::<n>`),
`amd.com/gpu` gives PCI addresses. They are normalised to the `hw_id` / PCI address form
the exporter joins device labels on.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpu_exporter.readers.file_values import Unreadable
from gpu_exporter.readers.sysfs.pci import normalize_pci_address

if TYPE_CHECKING:
    # grpc + protobuf and the generated messages cost about 11 MiB of resident memory:
    # they are imported on first use (a kubelet socket that exists), not on every host.
    import grpc

    from gpu_exporter.readers.kubelet.podresources_v1.messages import ListPodResourcesResponse

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# Resource names of GPU device plugins (NVIDIA, NVIDIA MIG "mixed" strategy, AMD, Intel).
_GPU_RESOURCE = re.compile(r"^(nvidia\.com/(gpu|mig-.+)|amd\.com/gpu|gpu\.intel\.com/.+)$")
# DRA drivers of GPUs (kubernetes-sigs/dra-driver-nvidia-gpu, ROCm/k8s-gpu-dra-driver,
# intel/intel-resource-drivers-for-kubernetes)
_GPU_DRIVER = re.compile(r"^gpu\.(nvidia|amd|intel)\.com$")
_REPLICA = re.compile(r"::\d+$")  # NVIDIA time-slicing / MPS replica suffix
# The kubelet's own limit for this API's responses is 16 MiB.
_MAX_MESSAGE = 16 * 1024 * 1024
# The one call we make, by its gRPC path: grpc's own multi-callable with the generated
# messages' (de)serialisers, no generated service stub.
LIST_METHOD = "/v1.PodResourcesLister/List"


MOUNT_SOCKET = ("mount the host's /var/lib/kubelet/pod-resources into the exporter "
                "(Kubernetes: a hostPath volume, as deploy/kubernetes does) or pass "
                "--processes.kubelet-socket=<the kubelet's socket>")


class PodResourcesError(Exception):
    """The socket exists but the kubelet did not answer List. `code` is the gRPC status
    name (UNAVAILABLE, DEADLINE_EXCEEDED, UNIMPLEMENTED, ...)."""

    def __init__(self, message: str, code: str = "UNKNOWN") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, order=True)
class ContainerRef:
    namespace: str
    pod_name: str
    container_name: str
    claim: str = ""  # the DRA ResourceClaim's name that gave the GPU; "": a device plugin


@dataclass
class Allocations:
    """Device key -> the containers it is allocated to, and the DRA devices the node's CDI
    specs do not resolve to a GPU (`<namespace>/<claim>: <CDI device>`)."""

    by_device: dict[str, tuple[ContainerRef, ...]]
    unresolved: tuple[str, ...] = ()


def normalise_device_id(device_id: str) -> str:
    """`GPU-…::3` -> `GPU-…`; `03:00.0` / `0000:03:00.0` -> `0000:03:00.0`."""
    device_id = _REPLICA.sub("", device_id.strip())
    return normalize_pci_address(device_id) or device_id


def is_gpu_resource(resource_name: str) -> bool:
    return bool(_GPU_RESOURCE.match(resource_name))


def gpu_allocations(
    response: ListPodResourcesResponse,
) -> dict[str, tuple[ContainerRef, ...]]:
    """Device id (normalised) -> the containers it is allocated to, sorted. A time-sliced
    GPU may be allocated to several containers."""
    out: dict[str, set[ContainerRef]] = {}
    for pod in response.pod_resources:
        for container in pod.containers:
            ref = ContainerRef(pod.namespace, pod.name, container.name)
            for devices in container.devices:
                if not is_gpu_resource(devices.resource_name):
                    continue
                for device_id in devices.device_ids:
                    out.setdefault(normalise_device_id(device_id), set()).add(ref)
    return {k: tuple(sorted(v)) for k, v in out.items()}


def is_gpu_driver(driver_name: str) -> bool:
    """A DRA driver that hands out GPUs: its devices must resolve to one (NVIDIA's
    gpu.nvidia.com, AMD's gpu.amd.com, Intel's gpu.intel.com)."""
    return bool(_GPU_DRIVER.match(driver_name))


def with_dynamic_resources(
    response: ListPodResourcesResponse, resolve: Callable[[str], str | None],
) -> Allocations:
    """Device-plugin allocations and DRA claims together. The kubelet reports one
    ClaimResource per allocated device, with every CDI device its driver named for it:
    AMD's driver names a `common` device (environment only) beside the GPU's own,
    NVIDIA's the GPU's alone. The device is the one GPU those resolve to by `resolve`
    (`readers.kubelet.cdi.resolver`); a GPU driver's device that resolves to none, or
    to more than one, is counted unresolved. Another driver's device (a NIC, NVIDIA's
    compute-domain channels) that names no GPU is none of the exporter's business."""
    out = {k: set(v) for k, v in gpu_allocations(response).items()}
    unresolved: list[str] = []
    for pod in response.pod_resources:
        for container in pod.containers:
            for claim in container.dynamic_resources:
                ref = ContainerRef(pod.namespace, pod.name, container.name, claim.claim_name)
                for resource in claim.claim_resources:
                    names = [d.name for d in resource.cdi_devices]
                    keys = {key for key in map(resolve, names) if key is not None}
                    if len(keys) == 1:
                        out.setdefault(keys.pop(), set()).add(ref)
                    elif keys or is_gpu_driver(resource.driver_name):
                        # what the kubelet gives to find the device by: the driver's
                        # pool and device names (1.34), its CDI devices
                        device = "/".join(n for n in (resource.pool_name,
                                                      resource.device_name) if n)
                        unresolved.append(
                            f"{claim.claim_namespace}/{claim.claim_name}: "
                            f"{resource.driver_name} {device or '(no device name)'} "
                            f"({', '.join(names) or 'no CDI device'})")
    return Allocations({k: tuple(sorted(v)) for k, v in out.items()}, tuple(unresolved))


def has_dynamic_resources(response: ListPodResourcesResponse) -> bool:
    return any(c.dynamic_resources for p in response.pod_resources for c in p.containers)


def socket_problem(path: str) -> Unreadable | None:
    """Why `path` is not a usable kubelet socket, and the fix; None when it looks like
    one."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return Unreadable(f"no kubelet PodResources socket at {path}", MOUNT_SOCKET)
    except OSError as exc:
        return Unreadable(
            f"cannot reach the kubelet PodResources socket {path}: {exc.strerror}",
            MOUNT_SOCKET)
    if not stat.S_ISSOCK(st.st_mode):
        return Unreadable(f"{path} is not a socket",
                          "pass --processes.kubelet-socket=<the kubelet's socket> "
                          f"(default {DEFAULT_SOCKET})")
    if not os.access(path, os.R_OK | os.W_OK):
        return Unreadable(
            f"no permission to use the kubelet PodResources socket {path} (writable by "
            "root alone)", "run the exporter as uid 0 (Kubernetes: runAsUser: 0)")
    return None


class PodResourcesClient:
    """One long-lived channel to the kubelet; `list_gpus()` once a scrape."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET) -> None:
        self.socket_path = socket_path
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._list: grpc.UnaryUnaryMultiCallable | None = None

    def _list_now(self) -> grpc.UnaryUnaryMultiCallable:
        import grpc

        from gpu_exporter.readers.kubelet.podresources_v1 import api_pb2

        with self._lock:
            if self._list is None:
                self._channel = grpc.insecure_channel(
                    "unix://" + os.path.abspath(self.socket_path),
                    options=[("grpc.max_receive_message_length", _MAX_MESSAGE)],
                )
                self._list = self._channel.unary_unary(
                    LIST_METHOD,
                    request_serializer=api_pb2.ListPodResourcesRequest.SerializeToString,
                    response_deserializer=api_pb2.ListPodResourcesResponse.FromString,
                )
            return self._list

    def list_gpus(self, timeout: float,
                  resolver: Callable[[], Callable[[str], str | None]] | None = None,
                  ) -> Allocations:
        """Raises PodResourcesError when the kubelet does not answer in `timeout`."""
        call = self._list_now()
        import grpc

        from gpu_exporter.readers.kubelet.podresources_v1 import api_pb2

        try:
            response = call(api_pb2.ListPodResourcesRequest(), timeout=timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            detail = exc.details() if hasattr(exc, "details") else str(exc)
            # A kubelet that restarted leaves a dead channel behind: start afresh next time.
            self.close()
            name = code.name if code is not None else "UNKNOWN"
            raise PodResourcesError(
                f"kubelet PodResources List on {self.socket_path}: {name} {detail}", name
            ) from None
        if resolver is None or not has_dynamic_resources(response):
            return Allocations(gpu_allocations(response))
        # the CDI specs are read only when a container holds a claim
        return with_dynamic_resources(response, resolver())

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel = None
            self._list = None
