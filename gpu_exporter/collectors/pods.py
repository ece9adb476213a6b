"""Which pod each GPU is allocated to, for the processes collector: the kubelet's
PodResources API, GPUs of Kubernetes DRA claims resolved through the node's CDI specs, and
finished pods (which the kubelet still lists) left out. Its states are the processes
collector's features `kubelet`, `pod_liveness` and `dra`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence

from gpu_exporter.collectors.base import Availability, Sink
from gpu_exporter.model import catalogue as c
from gpu_exporter.model.settings import Settings
from gpu_exporter.readers.file_values import Unreadable
from gpu_exporter.readers.kubelet import cdi, podliveness
from gpu_exporter.readers.kubelet.podresources import (
    ContainerRef,
    PodResourcesClient,
    PodResourcesError,
    socket_problem,
)
from gpu_exporter.readers.procfs.nvidia_driver import read_driver_gpus
from gpu_exporter.sources.nvml.stack import DEVFS, NvmlStack

# Never wait longer than this on the kubelet, whatever the scrape timeout.
_KUBELET_TIMEOUT = 2.0
_LIVENESS_FIX = ("mount the host's /var/log/pods read-only into the exporter's pod at the "
                 "same path (or point --processes.pod-log-dir at it)")


class PodAllocations:
    """The kubelet's GPU allocations of running pods, asked once a scrape. The states go
    into `features`, the processes collector's own dict, where they keep their order."""

    def __init__(self, settings: Settings, features: dict[str, Availability],
                 nvml: NvmlStack, socket: str, pod_log_dir: str, cdi_dirs: list[str]
                 ) -> None:
        self.settings = settings
        self._features = features
        self._nvml = nvml  # the MIG devices of its session resolve DRA's MIG claims
        self._socket = socket
        self._kubelet = PodResourcesClient(socket)
        # (when, why) the kubelet last let a List time out; None: it answers
        self._kubelet_silent: tuple[float, str] | None = None
        self._pod_log_dir = pod_log_dir
        self._cdi: cdi.CdiDevices | None = None
        self._cdi_dirs = cdi_dirs

    def close(self) -> None:
        self._kubelet.close()

    def kubelet_state(self, problem: Unreadable | None) -> None:
        """`processes.kubelet` (and `processes.pod_liveness` while there is no socket)."""
        if problem is None:
            state = Availability.enabled(self._socket)
        elif not os.path.lexists(self._socket) and "KUBERNETES_SERVICE_HOST" not in os.environ:
            # Not in a pod, no socket: not a Kubernetes node, nothing to fix.
            state = Availability.disabled(f"not a Kubernetes pod; {problem.reason}",
                                          f"on a Kubernetes node: {problem.fix}")
        else:
            state = Availability.unavailable(problem.reason, problem.fix)
        self._features["kubelet"] = state
        if problem is not None:
            self._features["pod_liveness"] = Availability.disabled(
                "no kubelet PodResources socket: no allocations to check")

    def read(self, sink: Sink) -> Mapping[str, tuple[ContainerRef, ...]] | None:
        """Device key -> the containers of running pods it is allocated to; None while
        the kubelet is not there or does not answer (pods unknown, not none)."""
        problem = socket_problem(self._socket)
        if problem is None and self._kubelet_silent is not None:
            # It did not answer in time: not asked again (each ask would cost every scrape
            # the whole wait) until the retry interval has passed.
            since, message = self._kubelet_silent
            if time.monotonic() - since < self.settings.retry_interval_seconds:
                sink.fail("kubelet", message)
                return None
        self.kubelet_state(problem)
        if problem is not None:
            # No socket (yet): nothing failed, pods are unknown; the state says why.
            return None
        self._kubelet_silent = None
        try:
            allocations = self._kubelet.list_gpus(
                min(_KUBELET_TIMEOUT, max(0.1, sink.time_left())), self._cdi_resolver)
        except PodResourcesError as exc:
            if exc.code == "DEADLINE_EXCEEDED":
                retry = self.settings.retry_interval_seconds
                message = f"{exc}; asked again every --collector.retry-interval ({retry:g} s)"
                self._kubelet_silent = (time.monotonic(), message)
                sink.fail("kubelet", message)
                self._features["kubelet"] = Availability.unavailable(
                    message, "check the kubelet on this node (`systemctl status kubelet`)")
                return None
            if exc.code == "UNIMPLEMENTED":  # an API the kubelet lacks: a state, no failure
                self._features["kubelet"] = Availability.unavailable(
                    f"the kubelet at {self._socket} does not serve PodResources v1 List",
                    "Kubernetes 1.20 or later serves it (feature gate KubeletPodResources, "
                    "on by default)")
                return None
            sink.fail("kubelet", str(exc))
            self._features["kubelet"] = Availability.unavailable(
                str(exc), "check the kubelet on this node (`systemctl status kubelet`); "
                "the exporter asks again every scrape")
            return None
        self._dra_state(allocations.unresolved)
        if self._cdi is not None:  # a claim was listed once: from then on a count
            c.DRA_DEVICES_UNRESOLVED.emit(sink, len(allocations.unresolved), {})
        return self._running(allocations.by_device)

    def _cdi_resolver(self) -> Callable[[str], str | None]:
        """CDI device name -> device key, from this node's CDI specs (read when the
        kubelet reports a claim) and the NVIDIA driver's minor numbers (hw_id: UUID)."""
        self._cdi = cdi.load(self._cdi_dirs)
        gpus = read_driver_gpus(self.settings.procfs, self.settings.get(DEVFS),
                                self.settings.sysfs)
        known = [g for g in (gpus.gpus if gpus else ()) if g.uuid]
        minors = {g.minor: g.uuid for g in known if g.minor is not None and g.uuid}
        return cdi.resolver(self._cdi, self.settings.sysfs, minors,
                            cdi.read_mig_minors(self.settings.procfs), self._migs(minors),
                            {g.pci_address: g.uuid for g in known if g.uuid})

    def _migs(self, minors: Mapping[int, str]) -> dict[tuple[int, int, int], str]:
        """(parent minor, GPU instance, compute instance) -> MIG device key, from the
        MIG devices of the current NVML session (none without one)."""
        session = self._nvml.current
        if session is None or session.gone:
            return {}
        minor_of = {uuid: minor for minor, uuid in minors.items()}
        out: dict[tuple[int, int, int], str] = {}
        for dev in session.devices.values():
            parent = minor_of.get(dev.identity.hw_id or "")
            for mig in dev.migs:
                gi, ci = mig.instance or (None, None)
                if parent is not None and gi is not None and ci is not None:
                    out[(parent, gi, ci)] = mig.identity.key
        return out

    def _dra_state(self, unresolved: Sequence[str]) -> None:
        """`processes.dra`: whether every GPU the kubelet reports through a DRA claim
        was resolved to a GPU of this node (none is ever guessed); `processes.cdi_specs`:
        whether every spec file was read (one that was not, past the parser's bounds or
        malformed, is named and skipped: the others' devices still resolve)."""
        if self._cdi is None:
            return  # no claim seen yet: no state
        dirs = ",".join(self._cdi_dirs)
        skipped = self._cdi.skipped
        self._features["cdi_specs"] = Availability.unavailable(
            f"{len(skipped)} CDI spec file(s) skipped: " + "; ".join(skipped[:3]),
            "the DRA driver that wrote it must write a valid spec: JSON or YAML of at most "
            f"{cdi.MAX_SPEC_BYTES} bytes, {cdi.MAX_SPEC_DEPTH} levels and "
            f"{cdi.MAX_SPEC_NODES} nodes, no YAML alias") if skipped else \
            Availability.enabled(f"{self._cdi.files} spec file(s) in {dirs}")
        problems = [*unresolved, *(p for p in self._cdi.problems if p not in skipped)]
        if problems:
            self._features["dra"] = Availability.unavailable(
                f"{len(unresolved)} DRA device(s) not resolved to a GPU: "
                + "; ".join([*problems, *skipped][:5]),
                "mount the DRA drivers' CDI spec directories read-only ("
                + dirs + ", --processes.cdi-spec-dirs) and the "
                "host's /proc (--path.procfs: the NVIDIA driver's GPU minors, "
                "driver/nvidia-caps/mig-minors for MIG devices)")
        else:
            self._features["dra"] = Availability.enabled(dirs)

    def _running(self, pods: Mapping[str, tuple[ContainerRef, ...]]
                 ) -> Mapping[str, tuple[ContainerRef, ...]]:
        """The allocations of pods the node does not show finished (kubernetes#119423:
        the kubelet lists a finished pod with its devices until the pod is deleted)."""
        try:
            live = podliveness.read(self._pod_log_dir, self.settings.sysfs)
        except podliveness.LivenessUnavailable as exc:
            self._features["pod_liveness"] = Availability.unavailable(
                f"{exc}: finished pods the kubelet still lists count as allocated",
                _LIVENESS_FIX)
            return pods
        self._features["pod_liveness"] = (
            Availability.enabled(self._pod_log_dir) if live.cgroups else
            Availability.unavailable(
                f"no kubelet cgroup tree under {self.settings.sysfs}/fs/cgroup: finished "
                "pods the kubelet still lists count as allocated",
                "mount the host's /sys (with /sys/fs/cgroup) and point --path.sysfs at it"))
        running = {device: tuple(r for r in refs if not live.finished(r.namespace, r.pod_name))
                   for device, refs in pods.items()}
        return {device: refs for device, refs in running.items() if refs}
