"""Processes on NVIDIA GPUs from NVML: running compute and graphics processes (v3) and
process utilization samples.

Utilization samples are asked for with the newest timestamp seen on that device at the
previous read, so each read covers the interval since the previous one (NVML answers
NOT_FOUND when nothing newer exists: then the processes have no utilization this time,
which is absent, not 0).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gpu_exporter.records import GpuTask

ProcessKind = Literal["compute", "graphics"]


class NvmlUnavailable(Exception):
    """NVML cannot be used on this host (no library, no driver, no permission)."""


@dataclass(frozen=True)
class GpuProcess:
    device: str  # hw_id: the GPU UUID, or the MIG UUID when the process runs in one
    pid: int
    memory_bytes: int | None  # None: NVML does not report it (WDDM, some MIG setups)
    kinds: frozenset[ProcessKind]


@dataclass(frozen=True)
class ProcessUtilization:
    device: str
    pid: int
    # mean of the samples since the previous read, by engine; memory-controller share
    # is not a hw_gpu_task and is kept apart
    utilization_ratio: Mapping[GpuTask, float]
    memory_controller_ratio: float
    samples: int


@dataclass
class NvidiaProcessesReading:
    processes: list[GpuProcess] = field(default_factory=list)
    utilization: list[ProcessUtilization] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (key, message)


def _nvml() -> Any:
    import pynvml

    return pynvml


class NvidiaProcessReader:
    def __init__(self) -> None:
        self._nv: Any = None
        self._last_seen: dict[str, int] = {}  # device UUID -> newest sample timestamp (µs)
        self._lock = threading.Lock()

    def start(self) -> None:
        """Raises NvmlUnavailable with the reason."""
        try:
            nv = _nvml()
        except ImportError as exc:  # the bindings are a dependency; still, say why
            raise NvmlUnavailable(f"nvidia-ml-py not importable: {exc}") from None
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise NvmlUnavailable(f"NVML: {exc}") from None
        self._nv = nv

    def close(self) -> None:
        if self._nv is not None:
            with contextlib.suppress(self._nv.NVMLError):
                self._nv.nvmlShutdown()
            self._nv = None

    # -- reading ---------------------------------------------------------------------
    def read(self) -> NvidiaProcessesReading:
        nv = self._nv
        out = NvidiaProcessesReading()
        if nv is None:
            return out
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as exc:
            out.failures.append(("nvml:count", f"nvmlDeviceGetCount: {exc}"))
            return out
        seen: set[str] = set()
        for index in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nv.nvmlDeviceGetUUID(handle))
            except nv.NVMLError as exc:
                out.failures.append((f"nvml:{index}", f"GPU {index}: {exc}"))
                continue
            seen.add(uuid)
            self._read_device(nv, handle, uuid, out)
        with self._lock:  # GPUs that went away do not keep a timestamp forever
            self._last_seen = {k: v for k, v in self._last_seen.items() if k in seen}
        return out

    def _read_device(
        self, nv: Any, handle: Any, uuid: str, out: NvidiaProcessesReading
    ) -> None:
        migs = self._mig_instances(nv, handle)
        by_pid: dict[tuple[str, int], tuple[int | None, set[ProcessKind]]] = {}
        calls: Sequence[tuple[ProcessKind, str]] = (
            ("compute", "nvmlDeviceGetComputeRunningProcesses"),
            ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
        )
        for kind, fn_name in calls:
            try:
                procs = _versioned(nv, fn_name)(handle)
            except nv.NVMLError_NotSupported:
                continue
            except nv.NVMLError as exc:
                out.failures.append((f"{fn_name}:{uuid}", f"{fn_name} on {uuid}: {exc}"))
                continue
            for p in procs:
                device = migs.get((_opt(p.gpuInstanceId), _opt(p.computeInstanceId)), uuid)
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
        out.utilization.extend(self._utilization(nv, handle, uuid, out))

    def _mig_instances(self, nv: Any, handle: Any) -> dict[tuple[int | None, int | None], str]:
        """(GPU instance id, compute instance id) -> MIG device UUID, when MIG is on."""
        try:
            current, _pending = nv.nvmlDeviceGetMigMode(handle)
        except nv.NVMLError:
            return {}
        if current != 1:
            return {}
        out: dict[tuple[int | None, int | None], str] = {}
        try:
            slots = nv.nvmlDeviceGetMaxMigDeviceCount(handle)
        except nv.NVMLError:
            return {}
        for slot in range(slots):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
                gi = nv.nvmlDeviceGetGpuInstanceId(mig)
                ci = nv.nvmlDeviceGetComputeInstanceId(mig)
                out[(gi, ci)] = _text(nv.nvmlDeviceGetUUID(mig))
            except nv.NVMLError:
                continue
        return out

    def _utilization(
        self, nv: Any, handle: Any, uuid: str, out: NvidiaProcessesReading
    ) -> list[ProcessUtilization]:
        with self._lock:
            last_seen = self._last_seen.get(uuid, 0)
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(handle, last_seen)
        except (nv.NVMLError_NotFound, nv.NVMLError_NotSupported):
            return []  # nothing new since last_seen / not on this GPU (or MIG mode)
        except nv.NVMLError as exc:
            out.failures.append((f"util:{uuid}", f"process utilization on {uuid}: {exc}"))
            return []
        sums: dict[int, list[float]] = {}
        newest = last_seen
        for s in samples:
            if int(s.timeStamp) <= last_seen:
                continue  # the library should not return these; never count one twice
            newest = max(newest, int(s.timeStamp))
            acc = sums.setdefault(int(s.pid), [0.0, 0.0, 0.0, 0.0, 0.0])
            acc[0] += s.smUtil
            acc[1] += s.encUtil
            acc[2] += s.decUtil
            acc[3] += s.memUtil
            acc[4] += 1
        with self._lock:
            self._last_seen[uuid] = newest
        result = []
        for pid, (sm, enc, dec, mem, n) in sorted(sums.items()):
            ratios: dict[GpuTask, float] = {
                "general": sm / n / 100.0, "encoder": enc / n / 100.0,
                "decoder": dec / n / 100.0,
            }
            result.append(ProcessUtilization(uuid, pid, ratios, mem / n / 100.0, int(n)))
        return result


def _versioned(nv: Any, name: str) -> Callable[[Any], list[Any]]:
    """The v3 call, or the bindings' default on drivers that lack v3."""
    v3 = getattr(nv, name + "_v3", None)
    default: Callable[[Any], list[Any]] = getattr(nv, name)
    if v3 is None:
        return default

    def call(handle: Any) -> list[Any]:
        try:
            result: list[Any] = v3(handle)
            return result
        except nv.NVMLError_FunctionNotFound:
            return default(handle)

    return call


def _opt(value: Any) -> int | None:
    # NVML marks "not in a MIG instance" with 0xFFFFFFFF.
    if value is None or int(value) == 0xFFFFFFFF:
        return None
    return int(value)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
