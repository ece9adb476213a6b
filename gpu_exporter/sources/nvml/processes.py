"""One scrape of one GPU's processes: running compute and graphics processes, and
process utilization samples.

Utilization samples are asked for with the newest timestamp seen on that device at the
previous read, so each read covers the interval since the previous one (NVML answers
NOT_FOUND when nothing newer exists: then the processes have no utilization this time,
which is absent, not 0). Whether a GPU gives samples at all is learnt once per session
and is its `processes.nvml_utilization` state: a driver without the function is
`unavailable` (with the fix), a GPU that does not report them (MIG mode, some boards)
`disabled`; neither is a failure, and neither is asked again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import pynvml

from gpu_exporter.model.features import Availability
from gpu_exporter.model.records import GpuTask
from gpu_exporter.sources.nvml.calls import Calls, DeviceLost, Versions
from gpu_exporter.sources.nvml.devices import (
    NvmlDevice,
    instance_id,
    process_utilization,
    utilization_state,
)

ProcessKind = Literal["compute", "graphics"]

# How far back the first utilization read of a GPU goes when no scrape interval is known
# yet (the exporter's first scrape): Prometheus' commonest interval.
FIRST_WINDOW_SECONDS = 15.0

_LISTS: tuple[tuple[ProcessKind, Versions], ...] = (
    ("compute", Versions.of("nvmlDeviceGetComputeRunningProcesses_v3",
                            "nvmlDeviceGetComputeRunningProcesses_v2")),
    ("graphics", Versions.of("nvmlDeviceGetGraphicsRunningProcesses_v3",
                             "nvmlDeviceGetGraphicsRunningProcesses_v2")),
)


@dataclass(frozen=True)
class GpuProcess:
    device: str  # device key: the GPU UUID, or the MIG UUID when the process runs in one
    pid: int
    memory_bytes: int | None  # None: NVML does not report it (WDDM, some MIG setups)
    kinds: frozenset[ProcessKind]


@dataclass(frozen=True)
class ProcessUtilization:
    device: str
    pid: int
    # mean of the samples since the previous read, by engine (NVML's memory-controller
    # share is no hw_gpu_task and no family: not kept)
    utilization_ratio: Mapping[GpuTask, float]
    samples: int


@dataclass
class DeviceProcesses:
    """One GPU's processes at one scrape."""

    processes: list[GpuProcess] = field(default_factory=list)
    utilization: list[ProcessUtilization] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)
    complete: bool = True  # False: a process list could not be read (others may be missing)
    lost: bool = False  # the GPU answered GPU_IS_LOST: nothing more is asked of it


@dataclass
class UtilizationState:
    """What one GPU's utilization sampling has learnt: the newest sample seen (µs) and
    whether the GPU gives samples (first known from discovery). Only the lane reading
    the GPU touches it."""

    availability: Availability
    # The first read asks for the samples of the last FIRST_WINDOW_SECONDS, not for all
    # the driver still buffers (lastSeenTimeStamp 0): a window like a scrape interval's.
    last_seen: int = field(
        default_factory=lambda: int((time.time() - FIRST_WINDOW_SECONDS) * 1_000_000))


class UtilizationSampler:
    """The processes collector's utilization sampling of every GPU of the current NVML
    session (its `UtilizationState` per GPU, forgotten when NVML starts again). The
    collector owns it and lends it to the NVML stack (`NvmlStack.utilization`), so that
    each GPU's samples are read in the same lane job as its process lists
    (`process_reads`): one hand-off per lane a scrape, not two rounds."""

    def __init__(self) -> None:
        self.by_gpu: dict[str, UtilizationState] = {}  # by device key (hw_id)
        self._generation = -1
        self.last_scrape = 0.0  # time.monotonic() of the collector's previous scrape

    def states(self, generation: int, devices: Mapping[int, NvmlDevice]
               ) -> dict[int, UtilizationState]:
        """Each GPU's state for this scrape's round, by NVML index (called once a round,
        by the thread that starts it)."""
        if generation != self._generation:
            self._generation = generation
            self.by_gpu = {}
        out = {}
        for index, dev in devices.items():
            state = self.by_gpu.get(dev.identity.key)
            if state is None:
                # The first read of a GPU covers one scrape interval (the one since the
                # collector's previous scrape; 15 s before the first), not everything the
                # driver still buffers.
                window = (time.monotonic() - self.last_scrape if self.last_scrape
                          else FIRST_WINDOW_SECONDS)
                state = self.by_gpu[dev.identity.key] = UtilizationState(
                    dev.process_utilization or Availability.enabled(),
                    int((time.time() - window) * 1_000_000))
            out[index] = state
        return out


def read_lists(dev: NvmlDevice) -> DeviceProcesses:
    """The GPU's compute and graphics process lists (no utilization). Read once per
    scrape for every collector that needs them (`process_reads`): the result is never
    changed afterwards. Raises NvmlGone; a lost GPU reports no processes (its device
    series say it is lost), and says its list is not complete."""
    out = DeviceProcesses()
    call = Calls(dev.identity.key)
    try:
        _read_lists(dev, call, out)
    except DeviceLost:
        return DeviceProcesses(complete=False, lost=True)  # its processes are unknown
    out.failures.extend(call.failures)
    return out


def with_utilization(dev: NvmlDevice, state: UtilizationState,
                     lists: DeviceProcesses) -> DeviceProcesses:
    """`lists` with the utilization samples since the previous read added (a new record).
    Raises NvmlGone."""
    if lists.lost or state.availability.state != "enabled":
        return lists
    call = Calls(dev.identity.key)
    try:
        samples = _utilization_since(dev, state, call)
    except DeviceLost:
        return DeviceProcesses(complete=False, lost=True)
    return replace(lists, utilization=samples, failures=[*lists.failures, *call.failures])


def _read_lists(dev: NvmlDevice, call: Calls, out: DeviceProcesses) -> None:
    uuid = dev.identity.key
    migs = {m.instance: m.identity.key for m in dev.migs}
    by_pid: dict[tuple[str, int], tuple[int | None, set[ProcessKind]]] = {}
    for kind, versions in _LISTS:
        failed = len(call.failures)
        procs = versions.read(call, dev.handle)
        if len(call.failures) > failed:
            out.complete = False
        for p in procs or ():
            device = migs.get((instance_id(p.gpuInstanceId), instance_id(p.computeInstanceId)),
                              uuid)
            used = p.usedGpuMemory
            key = (device, int(p.pid))
            prev_used, kinds = by_pid.get(key, (None, set()))
            kinds.add(kind)
            # A process with a compute and a graphics context is listed twice with the
            # same memory: the larger of the two, not the sum.
            both = [u for u in (prev_used, used) if u is not None]
            by_pid[key] = (max(both) if both else None, kinds)
    for (device, pid), (used, kinds) in sorted(by_pid.items()):
        out.processes.append(GpuProcess(device, pid, used, frozenset(kinds)))


def _utilization_since(dev: NvmlDevice, state: UtilizationState,
                       call: Calls) -> list[ProcessUtilization]:
    uuid = dev.identity.key
    try:
        samples = process_utilization(dev.handle, state.last_seen)
    except pynvml.NVMLError as exc:
        if exc.value in (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_NOT_SUPPORTED):
            state.availability = utilization_state(exc.value)
        elif exc.value != pynvml.NVML_ERROR_NOT_FOUND:  # NOT_FOUND: nothing since last_seen
            call.check(process_utilization.name, exc.value, exc)
        return []
    sums: dict[int, list[float]] = {}
    newest = state.last_seen
    for s in samples:
        if int(s.timeStamp) <= state.last_seen:
            continue  # the library should not return these; never count one twice
        newest = max(newest, int(s.timeStamp))
        acc = sums.setdefault(int(s.pid), [0.0, 0.0, 0.0, 0.0])
        acc[0] += s.smUtil
        acc[1] += s.encUtil
        acc[2] += s.decUtil
        acc[3] += 1
    state.last_seen = newest
    result = []
    for pid, (sm, enc, dec, n) in sorted(sums.items()):
        ratios: dict[GpuTask, float] = {
            "general": sm / n / 100.0, "encoder": enc / n / 100.0, "decoder": dec / n / 100.0,
        }
        result.append(ProcessUtilization(uuid, pid, ratios, int(n)))
    return result
