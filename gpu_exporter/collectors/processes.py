"""Who is using the GPU: memory and utilization per process, with the executable,
container and Kubernetes pod of each, and (opt-in) each GPU's pod on its device series.

Sources: NVML for NVIDIA, DRM fdinfo for AMD and Intel (the shared walker in
`readers.procfs.fdinfo`), `/proc/<pid>/{comm,cgroup,stat}` for the process, the kubelet's
PodResources API for pod names (`pods.PodAllocations`). Each source is optional: without
NVML, fdinfo clients or a kubelet the others still report.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpu_exporter.collectors.base import (
    Availability,
    Collector,
    Feature,
    Sink,
    device_features,
)
from gpu_exporter.collectors.pods import PodAllocations
from gpu_exporter.model import catalogue as c
from gpu_exporter.model import flagtypes
from gpu_exporter.model.attribution import Consumer
from gpu_exporter.model.labels import PodLabels, ProcessLabels, known
from gpu_exporter.model.process_cap import ProcessCap
from gpu_exporter.model.process_energy import ProcessKey
from gpu_exporter.model.records import GpuTask
from gpu_exporter.model.settings import Option
from gpu_exporter.readers.kubelet import cdi, podliveness
from gpu_exporter.readers.kubelet.podresources import (
    DEFAULT_SOCKET,
    ContainerRef,
    socket_problem,
)
from gpu_exporter.readers.procfs import accel, fdinfo
from gpu_exporter.readers.procfs.procinfo import ProcessInfo, ProcessTable
from gpu_exporter.readers.sysfs.pci import drm_card_addresses
from gpu_exporter.sources.nvml import processes as nvml_processes
from gpu_exporter.sources.nvml import stack as nvml_stack
from gpu_exporter.sources.nvml.calls import NvmlGone, NvmlUnavailable
from gpu_exporter.sources.nvml.stack import StackBusy

# The drivers of accel-subsystem devices whose node holder is the card's one user.
GAUDI_DRIVERS = ("habanalabs",)

SOCKET_OPTION = Option(
    "processes.kubelet-socket", str, DEFAULT_SOCKET,
    "kubelet PodResources socket: pod, namespace and container of each GPU and process. "
    "Missing socket: no pod names, everything else still reported.")
DEVICE_LABELS_OPTION = Option(
    "processes.kubernetes-device-labels", bool, False,
    "Put k8s_pod_name, k8s_namespace_name and k8s_container_name of the pod a GPU is "
    "allocated to on that GPU's device series.", is_flag=True)
MAX_PER_GPU_OPTION = Option(
    "processes.max-per-gpu", flagtypes.Count(1, 10_000), 16,
    "Processes per GPU with series of their own (the first seen); the others are folded "
    "into one process_executable_name=\"other\" series per GPU and counted by "
    "gpu_exporter_processes_folded_total.")
POD_LOG_DIR_OPTION = Option(
    "processes.pod-log-dir", str, podliveness.DEFAULT_LOG_DIR,
    "The kubelet's pod log directory (mount the host's read-only): with the pods' cgroups "
    "it tells finished pods, which the kubelet still lists with their GPUs, from running "
    "ones.")
CDI_DIRS_OPTION = Option(
    "processes.cdi-spec-dirs", str, ",".join(cdi.DEFAULT_DIRS),
    "Comma-separated CDI spec directories (read-only): GPUs allocated through Kubernetes "
    "DRA are resolved from the specs the DRA drivers write there.")
NO_DRM_CARD = Availability.disabled(
    "no amdgpu, i915 or xe card: no DRM clients to read (NVIDIA processes come from NVML)")


@dataclass
class _Usage:
    """One process on one device, merged from every context/client it holds there."""

    memory_bytes: int | None = None
    utilization: dict[GpuTask, float] | None = None
    # Busy measure over the interval, comparable between the processes of one device
    # (NVML: sum of smUtil of the new samples; fdinfo: engine busy ratios): its share of
    # the GPU's energy. None: the driver gave none this interval.
    activity: float | None = None

    def add(self, other: _Usage) -> None:
        """Another process folded into this one (the "other" series of a GPU)."""
        if other.memory_bytes is not None:
            self.memory_bytes = (self.memory_bytes or 0) + other.memory_bytes
        if other.activity is not None:
            self.activity = (self.activity or 0.0) + other.activity
        if other.utilization is not None:
            merged = self.utilization if self.utilization is not None else {}
            for task, ratio in other.utilization.items():
                merged[task] = min(1.0, merged.get(task, 0.0) + ratio)
            self.utilization = merged


class ProcessesCollector(Collector):
    waits_for_devices = True  # in lanes, one per GPU
    name = "processes"
    help = ("GPU memory and utilization per process (NVML; DRM fdinfo for AMD and Intel) "
            "with executable, container and Kubernetes pod.")
    options = (SOCKET_OPTION, DEVICE_LABELS_OPTION, MAX_PER_GPU_OPTION, POD_LOG_DIR_OPTION,
               CDI_DIRS_OPTION)

    def start(self) -> Availability:
        self._table = ProcessTable(self.settings.procfs)
        self._engines = fdinfo.EngineUsage()
        socket = self.settings.get(SOCKET_OPTION)
        self._device_labels = self.settings.get(DEVICE_LABELS_OPTION)
        self._cap = ProcessCap(self.settings.get(MAX_PER_GPU_OPTION))
        self._device_files = True  # AMD/Intel/Gaudi cards last scrape (unknown: True)
        self._nvml = nvml_stack.attach(self.settings)
        # Per GPU of the current NVML session: what its utilization sampling learnt. Lent
        # to the NVML stack, which reads each GPU's samples in the job that reads its
        # process lists (sources/nvml/process_reads.py).
        self._sampler = self._nvml.utilization = nvml_processes.UtilizationSampler()
        self._features: dict[str, Availability] = {}
        self._pods = PodAllocations(
            self.settings, self._features, self._nvml, socket,
            self.settings.get(POD_LOG_DIR_OPTION),
            [d for d in self.settings.get(CDI_DIRS_OPTION).split(",") if d])
        # Unavailable: the state says why; tried again every retry interval.
        with contextlib.suppress(NvmlUnavailable, StackBusy):
            self._nvml.session(time.monotonic() + self.settings.scrape_timeout_seconds,
                               force=True, wait=True)
        self._features["nvml"] = self._nvml.nvml_state()
        self._pods.kubelet_state(socket_problem(socket))
        self._procfs_checked = time.monotonic()
        self._procfs_problem = fdinfo.procfs_problem(self.settings.procfs)
        self._fdinfo_state(bool(_drm_gpus(self.settings.sysfs)))
        return Availability.enabled("; ".join(
            f"{name}: {a.state}" + (f" ({a.reason})" if a.reason else "")
            for name, a in self._features.items()
        ))

    def features(self) -> Sequence[Feature]:
        out = [Feature(name, a) for name, a in self._features.items()]
        session = self._nvml.current
        if session is not None and not session.gone:
            sampling = self._sampler.by_gpu
            out.extend(device_features("nvml_utilization", {
                d.identity.key: (sampling[d.identity.key].availability
                                 if d.identity.key in sampling
                                 else d.process_utilization or Availability.enabled())
                for _, d in sorted(session.devices.items())}))
        return out

    def _fdinfo_state(self, drm_cards: bool) -> None:
        """DRM fdinfo: off without an AMD/Intel card; unavailable while the procfs is
        not the host's or lets us into no other process (checked again every retry
        interval: a remount, added capabilities)."""
        if not drm_cards:
            self._features["fdinfo"] = NO_DRM_CARD
            return
        if time.monotonic() - self._procfs_checked >= self.settings.retry_interval_seconds:
            self._procfs_checked = time.monotonic()
            self._procfs_problem = fdinfo.procfs_problem(self.settings.procfs)
        problem = self._procfs_problem
        self._features["fdinfo"] = (
            Availability.unavailable(problem.reason, problem.fix) if problem
            else Availability.enabled(f"DRM fdinfo under {self.settings.procfs}"))

    def close(self) -> None:
        if self._nvml.utilization is self._sampler:
            self._nvml.utilization = None
        nvml_stack.detach(self._nvml)
        self._pods.close()

    # -- one scrape --------------------------------------------------------------------
    def guarded(self) -> bool:
        # NVML's (re)start, and the DRM and accel drivers' fdinfo, can hang (a driver
        # holding a lock through a GPU reset); NVML's per-GPU calls run in lanes and the
        # kubelet call has a deadline. Device files: as seen by the previous scrape.
        return self._device_files or not self._nvml.steady()

    def collect(self, sink: Sink) -> None:
        # NVML's process lists are read in the NVML stack's lanes while the kubelet and
        # the AMD/Intel clients are read here: a GPU hung in a process call costs only
        # its own processes.
        sink.inputs.begin_nvml_processes(self._nvml, sink.deadline)
        self._sampler.last_scrape = time.monotonic()
        pods = self._pods.read(sink)
        usage: dict[tuple[str, int], _Usage] = {}
        read: set[str] = set()  # devices whose process lists were read this scrape
        drm = self._collect_fdinfo(sink, usage, read)
        accel_nodes = self._collect_accel(sink, usage, read)
        self._device_files = drm or accel_nodes
        self._collect_nvidia(sink, usage, read)
        infos = self._table.lookup_many(pid for _, pid in usage)
        self._table.prune()
        uid_pods = _pods_by_uid(usage, infos, pods)
        by_device: dict[str, list[tuple[int, _Usage]]] = {}
        for (device, pid), u in sorted(usage.items()):
            by_device.setdefault(device, []).append((pid, u))
        for device in sorted(by_device.keys() | read):
            consumers = self._emit_device(sink, device, by_device.get(device, []), infos,
                                          pods, uid_pods)
            if device in read:
                sink.consumers[device] = consumers
        self._cap.forget_other_devices(by_device.keys() | read)
        c.PROCESSES_FOLDED.emit(sink, self._cap.folded_total, {})
        c.PROCESS_FACTS_CACHE_LOOKUPS.emit(sink, self._table.hits, {"result": "hit"})
        c.PROCESS_FACTS_CACHE_LOOKUPS.emit(sink, self._table.misses, {"result": "miss"})
        for device, refs in sorted((pods or {}).items()):
            for r in refs:
                labels: c.GpuAllocationLabels = {
                    "k8s_namespace_name": r.namespace, "k8s_pod_name": r.pod_name,
                    "k8s_container_name": r.container_name}
                if r.claim:
                    labels["k8s_resourceclaim_name"] = r.claim
                c.K8S_GPU_ALLOCATION_INFO.emit(sink, 1, labels, device)
        if self._device_labels and pods:
            for device, refs in pods.items():
                sink.label_device(device, _pod_labels(refs))

    def _emit_device(
        self, sink: Sink, device: str, entries: list[tuple[int, _Usage]],
        infos: Mapping[int, ProcessInfo], pods: Mapping[str, tuple[ContainerRef, ...]] | None,
        uid_pods: Mapping[str, tuple[str, str]],
    ) -> list[Consumer[ProcessKey]]:
        """The process series of one device, the processes beyond the cap folded into
        one; what the device's energy is split among (one consumer per series, keyed by
        the process's start time and its labels: a reused pid is a new counter)."""
        own = self._cap.assign(device, [_identity(pid, infos) for pid, _ in entries])
        series: list[tuple[int | None, ProcessLabels, _Usage]] = []
        other: _Usage | None = None
        for pid, u in entries:
            if _identity(pid, infos) in own:
                info = infos.get(pid)
                labels = _process_labels(device, pid, info, pods, uid_pods)
                series.append((info.start_time_ticks if info is not None else None, labels, u))
            else:
                other = other or _Usage()
                other.add(u)
        if other is not None:
            series.append((None, {"process_executable_name": "other"}, other))
        consumers = []
        for started, labels, u in series:
            if self._device_labels and pods:
                # The device's pod labels are joined into every series of the device; a
                # process's own (even unknown = empty, i.e. absent in Prometheus) win, so
                # a host process is never credited to the pod its GPU is allocated to.
                labels.setdefault("k8s_namespace_name", "")
                labels.setdefault("k8s_pod_name", "")
                labels.setdefault("k8s_container_name", "")
            c.PROCESS_GPU_MEMORY_USAGE.emit(sink, u.memory_bytes, labels, device)
            for task, ratio in sorted((u.utilization or {}).items()):
                c.PROCESS_GPU_UTILIZATION.emit(sink, ratio, {**labels, "hw_gpu_task": task},
                                               device)
            consumers.append(Consumer(ProcessKey.of(labels, started), u.activity,
                                      u.memory_bytes))
        return consumers

    def _collect_nvidia(self, sink: Sink, usage: dict[tuple[str, int], _Usage],
                        read: set[str]) -> None:
        """Adds to `read` the GPUs (and MIG devices) whose process lists were read whole;
        those that could not be are unknown this scrape (`sink.consumers` None)."""
        try:
            lists = sink.inputs.nvml_processes(self._nvml, sink.deadline)
        except NvmlUnavailable:
            self._features["nvml"] = self._nvml.nvml_state()
            return
        except StackBusy as exc:
            sink.fail("nvml:busy", str(exc))
            return
        except TimeoutError as exc:  # another collector's round passed the deadline
            sink.fail("nvml:timeout", str(exc))
            return
        self._features["nvml"] = self._nvml.nvml_state()
        session, results = lists.session, lists.results
        running: set[tuple[str, int]] = set()
        utilization: list[nvml_processes.ProcessUtilization] = []
        for index, dev in lists.devices.items():
            key = dev.identity.key
            devices = [key, *(m.identity.key for m in dev.migs)]
            sink.consumers.update(dict.fromkeys(devices))  # until read whole, below
            if index in lists.busy:
                sink.fail(f"{key}:busy", f"GPU {key} is still stuck in an NVML process call "
                                         "from an earlier scrape")
                continue
            if index not in results:
                sink.fail(f"{key}:timeout", f"GPU {key} did not answer its NVML process "
                                            "calls within the scrape timeout")
                continue
            result, error = results[index]
            if isinstance(error, NvmlGone):
                self._nvml.lost(session, error)
                self._features["nvml"] = self._nvml.nvml_state()
                continue
            if isinstance(error, Exception):
                sink.fail(f"{key}:{type(error).__name__}", f"processes on GPU {key}: {error}")
                continue
            if error is not None:
                raise error
            if result is None:
                continue
            for fkey, message in result.failures:
                sink.fail(fkey, message)
            if result.complete:
                read.update(devices)
            for p in result.processes:
                running.add((p.device, p.pid))
                usage.setdefault((p.device, p.pid), _Usage()).memory_bytes = p.memory_bytes
            utilization.extend(result.utilization)
        for u in utilization:
            # Samples of a process that has exited since are not reported: it is gone.
            if (u.device, u.pid) in running:
                entry = usage[(u.device, u.pid)]
                entry.utilization = dict(u.utilization_ratio)
                # its share of the GPU's energy: the sum of smUtil of the new samples
                entry.activity = u.utilization_ratio.get("general", 0.0) * u.samples

    def _collect_fdinfo(self, sink: Sink, usage: dict[tuple[str, int], _Usage],
                        read: set[str]) -> bool:
        """The DRM clients' usage; True when the host has an AMD or Intel card."""
        gpus = _drm_gpus(self.settings.sysfs)
        self._fdinfo_state(bool(gpus))
        if not gpus:
            return False  # no AMD/Intel GPU: spare every scrape a walk over every open file
        try:
            clients = sink.inputs.drm_clients(self.settings.procfs, sink.deadline)
        except TimeoutError as exc:
            sink.fail("fdinfo", str(exc))
            for pci in gpus:
                sink.consumers[pci] = None  # unknown this scrape, not free
            return True
        read.update(gpus)
        usages = {u.client.key: u for u in self._engines.update(clients)}
        for client in clients:
            u = _Usage()
            if client.vram_bytes is not None:
                u.memory_bytes = client.vram_bytes
            seen = usages.get(client.key)
            if seen is not None:
                u.utilization = dict(seen.utilization_ratio)
                u.activity = sum(seen.engine_ratio.values())
            # A process holding several DRM files on one GPU: their memory and busy
            # time add up (each file is a separate client of the driver).
            usage.setdefault((client.pci_address, client.pid), _Usage()).add(u)
        return True


    def _collect_accel(self, sink: Sink, usage: dict[tuple[str, int], _Usage],
                       read: set[str]) -> bool:
        """Gaudi: the process holding a card's accel node is its one user (the driver
        gives one process the compute context), charged the whole card's energy; the
        driver gives no per-process memory or utilization (docs/gaudi.md). True when
        the host has a Gaudi card."""
        nodes = accel.accel_devices(self.settings.sysfs, GAUDI_DRIVERS)
        if not nodes:
            return False  # no Gaudi: spare every scrape a walk over every open file
        try:
            holders = sink.inputs.accel_holders(self.settings.procfs, sink.deadline)
        except TimeoutError as exc:
            sink.fail("accel", str(exc))
            for pci in nodes.values():
                sink.consumers[pci] = None  # unknown this scrape, not free
            return True
        read.update(nodes.values())
        for minor, pci in nodes.items():
            for pid in holders.get(minor, ()):
                usage.setdefault((pci, pid), _Usage()).add(_Usage(activity=1.0))
        return True


def _drm_gpus(sysfs: str) -> frozenset[str]:
    """PCI addresses of the DRM cards of drivers with fdinfo clients (amdgpu, i915, xe)."""
    return drm_card_addresses(sysfs, fdinfo.DRIVERS)


def _identity(pid: int, infos: Mapping[int, ProcessInfo]) -> tuple[int, int | None]:
    """A process, not a pid: pid and start time (a reused pid is another process)."""
    info = infos.get(pid)
    return (pid, info.start_time_ticks if info is not None else None)


def _pods_by_uid(
    usage: Mapping[tuple[str, int], _Usage], infos: Mapping[int, ProcessInfo],
    pods: Mapping[str, tuple[ContainerRef, ...]] | None,
) -> dict[str, tuple[str, str]]:
    """Pod uid (from a process's cgroup) -> (namespace, pod name), learnt from processes on
    a GPU allocated to exactly one pod. The kubelet API names pods but gives no uid; this
    also names the pod of a process on a GPU shared by several pods (time-slicing)."""
    out: dict[str, tuple[str, str]] = {}
    if not pods:
        return out
    for device, pid in usage:
        info = infos.get(pid)
        if info is None or info.pod_uid is None:
            continue
        candidates = {(r.namespace, r.pod_name) for r in pods.get(device, ())}
        if len(candidates) == 1:
            out.setdefault(info.pod_uid, next(iter(candidates)))
    return out



def _process_labels(
    device: str, pid: int, info: ProcessInfo | None,
    pods: Mapping[str, tuple[ContainerRef, ...]] | None,
    uid_pods: Mapping[str, tuple[str, str]],
) -> ProcessLabels:
    if info is None:
        # exited during the scrape, or in a pid namespace we cannot see
        return {"process_pid": str(pid)}
    labels = known(ProcessLabels, process_pid=str(pid),
                   process_executable_name=info.executable_name,
                   container_id=info.container_id, slurm_job_id=info.slurm_job_id)
    if info.pod_uid is None:
        return labels  # a host process is never labelled with the pod its GPU serves
    labels["k8s_pod_uid"] = info.pod_uid
    pod = uid_pods.get(info.pod_uid)
    if pod is None:
        return labels
    labels["k8s_namespace_name"], labels["k8s_pod_name"] = pod
    containers = {r.container_name for r in (pods or {}).get(device, ())
                  if (r.namespace, r.pod_name) == pod}
    if len(containers) == 1:
        labels["k8s_container_name"] = next(iter(containers))
    return labels


def _pod_labels(refs: tuple[ContainerRef, ...]) -> PodLabels:
    """A GPU shared by several pods (time-slicing) lists them all, comma-separated in the
    same order in each label (the n-th namespace goes with the n-th pod and container),
    so the device stays one series."""
    return {
        "k8s_namespace_name": ",".join(r.namespace for r in refs),
        "k8s_pod_name": ",".join(r.pod_name for r in refs),
        "k8s_container_name": ",".join(r.container_name for r in refs),
    }
