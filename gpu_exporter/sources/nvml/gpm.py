"""NVIDIA GPM (GPU Performance Monitoring, Hopper and newer) through NVML: how busy the
SMs, the tensor and other pipes and the memory really are, the values DCGM serves as its
`DCGM_FI_PROF_*` fields, without DCGM.

GPM as nvml.h has it: a sample is an opaque buffer (`nvmlGpmSampleAlloc`) into which
`nvmlGpmSampleGet` (a GPU) or `nvmlGpmMigSampleGet` (one MIG GPU instance) copies the
hardware's cumulative counters; `nvmlGpmMetricsGet` turns two samples into averages over
the time between them, percentages, each metric with its own return code.

One `Sampler` per target keeps its last sample between scrapes, so a scrape costs one
sample call and one metrics call per target, and its values cover the time since the
previous scrape (the first sample is taken at start, so the first scrape has values). A
scrape less than `MIN_WINDOW_SECONDS` after the last sample (two scrapers close together)
gets the last computed values again: NVML refreshes its counters about every 100 ms, so a
shorter window is noise.

MIG: GPM samples a GPU instance, not a compute instance (a MIG device). A GPU instance
with one compute instance (the usual layout) reports on that MIG device; one split into
several compute instances reports once, on the parent GPU with its `gpu_instance_id`
(copying it onto each compute instance would count it several times); one with no compute
instance has no MIG device and is not reported.

The binding's ABI: `nvmlGpmMetricsGet_t` holds `NVML_GPM_METRIC_MAX` entries and the ids
it names differ between nvidia-ml-py releases (98 entries without DMMA in 12.570, 477 in
13.615). Only ids the installed binding defines are asked for, and an id the driver
answers NOT_SUPPORTED or INVALID_ARGUMENT for (it does not know it) is not asked again.

Whether GPM conflicts with profilers: NVIDIA (DCGM maintainers, NVIDIA/DCGM#62) state
that GPM does not use the perfmon subsystem that DCGM's profiling module and Nsight lock,
so it runs beside them. Whatever error NVML returns on a device all the same becomes that
device's `nvidia.gpm` feature state, with the error.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

from gpu_exporter.model.features import Availability
from gpu_exporter.model.records import GpmPipe, GpmReading
from gpu_exporter.model.settings import Option
from gpu_exporter.sources.nvml.calls import GONE, LOST, DeviceLost, NvmlGone

MIN_WINDOW_SECONDS = 0.1  # nvml.h: samples closer than 100 ms are not meaningful

GPM = Option(
    "collector.nvidia.gpm", bool, True,
    "Read SM, tensor-pipe and DRAM activity through NVML GPM (NVIDIA Hopper and newer): "
    "one sample call and one metrics call per GPU (and MIG GPU instance) per scrape.",
    is_flag=True)

# What each value is, by the binding's name of its GPM metric; `GpmReading` field or pipe.
_SCALARS: Mapping[str, str] = {
    "engine_active_ratio": "NVML_GPM_METRIC_GRAPHICS_UTIL",
    "sm_active_ratio": "NVML_GPM_METRIC_SM_UTIL",
    "sm_occupancy_ratio": "NVML_GPM_METRIC_SM_OCCUPANCY",
    "tensor_active_ratio": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "dram_active_ratio": "NVML_GPM_METRIC_DRAM_BW_UTIL",
}
_PIPES: Mapping[GpmPipe, str] = {
    "tensor_hmma": "NVML_GPM_METRIC_HMMA_TENSOR_UTIL",
    "tensor_imma": "NVML_GPM_METRIC_IMMA_TENSOR_UTIL",
    "tensor_dfma": "NVML_GPM_METRIC_DFMA_TENSOR_UTIL",
    "tensor_dmma": "NVML_GPM_METRIC_DMMA_TENSOR_UTIL",  # not in bindings before 13.6xx
    "fp64": "NVML_GPM_METRIC_FP64_UTIL",
    "fp32": "NVML_GPM_METRIC_FP32_UTIL",
    "fp16": "NVML_GPM_METRIC_FP16_UTIL",
    "integer": "NVML_GPM_METRIC_INTEGER_UTIL",
}
# A metric the driver does not have: not asked again.
_UNKNOWN_METRIC = frozenset({pynvml.NVML_ERROR_NOT_SUPPORTED,
                             pynvml.NVML_ERROR_INVALID_ARGUMENT,
                             pynvml.NVML_ERROR_NOT_FOUND})
_FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
_VERSION_MISMATCH = pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH

FIX_DRIVER = "update the NVIDIA driver to R525 or newer (GPM came with it)"
FIX_BINDINGS = ("install the nvidia-ml-py release that matches the driver (its GPM "
                "structures are a different version from the driver's)")
FIX_PROFILER = ("check that nothing holds the GPU exclusively (a vGPU guest with part of "
                "a GPU has no GPM); --no-collector.nvidia.gpm turns GPM off")
_plain = ctypes.Structure.__getattribute__  # pynvml's structures decode every attribute


def metric_ids() -> dict[str, int]:
    """What to ask for: `GpmReading` field or pipe name -> metric id, for the ids the
    installed binding defines (its struct has room for NVML_GPM_METRIC_MAX entries)."""
    limit = int(getattr(pynvml, "NVML_GPM_METRIC_MAX", 0))
    out: dict[str, int] = {}
    for name, const in (*_SCALARS.items(), *_PIPES.items()):
        mid = getattr(pynvml, const, None)
        if mid is not None and 0 < int(mid) < limit:
            out[name] = int(mid)
    return out


@dataclass(frozen=True)
class GpmSeries:
    """One target's values at one scrape. `device`: the key of the device whose labels
    the series carry (the GPU, or the MIG device of a GPU instance with one compute
    instance); `gpu_instance_id`: set for a GPU instance with several."""

    device: str
    gpu_instance_id: int | None
    reading: GpmReading


class GpmError(Exception):
    """A GPM call failed on this target: `availability` says why and what to do."""

    def __init__(self, availability: Availability, sticky: bool) -> None:
        super().__init__(availability.reason)
        self.availability = availability
        self.sticky = sticky  # the driver will not change its answer: stop asking


def _error(what: str, exc: pynvml.NVMLError) -> Exception:
    """A failed GPM call, sorted: the device lost, NVML gone, or a feature state."""
    code = exc.value
    if code in LOST:
        return DeviceLost(f"{what}: {exc}")
    if code in GONE:
        return NvmlGone(f"{what}: {exc}")
    if code == _FUNCTION_NOT_FOUND:
        return GpmError(Availability.unavailable(
            f"this NVML library has no {what} (a driver older than GPM)", FIX_DRIVER), True)
    if code == _VERSION_MISMATCH:
        return GpmError(Availability.unavailable(
            f"{what}: {exc}: the driver does not know the version of the GPM structures "
            "these nvidia-ml-py bindings send", FIX_BINDINGS), True)
    if code == pynvml.NVML_ERROR_NOT_SUPPORTED:
        return GpmError(Availability.unavailable(
            f"{what}: {exc} (GPM is not available to this host on this GPU)",
            FIX_PROFILER), True)
    return GpmError(Availability.unavailable(f"{what}: {exc}", FIX_PROFILER), False)


def support(handle: Any) -> Availability:
    """Whether this GPU gives GPM samples (nvmlGpmQueryDeviceSupport). Raises
    DeviceLost, NvmlGone."""
    try:
        answer = pynvml.nvmlGpmQueryDeviceSupport(handle)
    except pynvml.NVMLError as exc:
        err = _error("nvmlGpmQueryDeviceSupport", exc)
        if isinstance(err, GpmError):
            return err.availability
        raise err from None
    if not _plain(answer, "isSupportedDevice"):
        return Availability.disabled(
            "this GPU has no GPM (NVIDIA Hopper and newer have it): no SM, tensor or DRAM "
            "activity")
    return Availability.enabled()


class Sampler:
    """One target's GPM: a GPU (`gpu_instance_id` None) or one of its MIG GPU instances
    (`handle` is then the parent GPU's). Not thread-safe: one device is read by one lane
    at a time."""

    def __init__(self, handle: Any, gpu_instance_id: int | None = None,
                 ids: Mapping[str, int] | None = None) -> None:
        self.handle = handle
        self.gpu_instance_id = gpu_instance_id
        self._samples: list[Any] = []  # [previous, spare]
        # (value name, NVML code) of the metrics that failed in the last metrics call
        self.metric_errors: list[tuple[str, int]] = []
        self._previous_at: float | None = None
        self._last: GpmReading | None = None
        self._windows = 0  # windows taken since start: the first scrape waits for one
        self._ids = dict(metric_ids() if ids is None else ids)
        self._request = self._build_request()

    def _build_request(self) -> Any:
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self._ids)
        for i, mid in enumerate(self._ids.values()):
            request.metrics[i].metricId = mid
        return request

    def _sample(self, into: Any) -> None:
        if self.gpu_instance_id is None:
            pynvml.nvmlGpmSampleGet(self.handle, into)
        else:
            pynvml.nvmlGpmMigSampleGet(self.handle, self.gpu_instance_id, into)

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except pynvml.NVMLError as exc:
            raise _error(what, exc) from None

    @property
    def first_window_at(self) -> float | None:
        """When the first window will be long enough, until it has been taken (whether
        or not it gave values: a target whose every metric failed waits no more)."""
        if self._windows or self._previous_at is None:
            return None
        return self._previous_at + MIN_WINDOW_SECONDS

    @property
    def _sample_name(self) -> str:
        return "nvmlGpmSampleGet" if self.gpu_instance_id is None else "nvmlGpmMigSampleGet"

    def start(self, now: float) -> None:
        """Allocates the two sample buffers and takes the first sample (`now`: when).
        Raises GpmError, DeviceLost, NvmlGone."""
        while len(self._samples) < 2:
            self._samples.append(self._call("nvmlGpmSampleAlloc", pynvml.nvmlGpmSampleAlloc))
        self._call(self._sample_name, lambda: self._sample(self._samples[0]))
        self._previous_at = now
        self._windows = 0

    def read(self, clock: Callable[[], float]) -> GpmReading | None:
        """The averages since the previous sample (`clock()`: time.monotonic or a test's
        clock). None until a first window of at least MIN_WINDOW_SECONDS has passed.
        Raises GpmError, DeviceLost, NvmlGone."""
        now = clock()
        if self._previous_at is None:
            self.start(now)
            return None
        if now - self._previous_at < MIN_WINDOW_SECONDS:
            return self._last
        self.metric_errors = []
        previous, spare = self._samples
        self._call(self._sample_name, lambda: self._sample(spare))
        taken = clock()
        window = taken - self._previous_at
        # The new sample is the next window's start even if the metrics call fails.
        self._samples = [spare, previous]
        self._previous_at = taken
        self._windows += 1
        if not self._ids:
            self._last = None
            return None
        request = self._request
        request.sample1 = previous
        request.sample2 = spare
        self._call("nvmlGpmMetricsGet", lambda: pynvml.nvmlGpmMetricsGet(request))
        self._last = self._reading(window)
        return self._last

    def _reading(self, window: float) -> GpmReading:
        values: dict[str, float] = {}
        unknown = []
        entries = _plain(self._request, "metrics")
        for i, name in enumerate(self._ids):
            entry = entries[i]
            returned = _plain(entry, "nvmlReturn")
            if returned != pynvml.NVML_SUCCESS:
                if returned in _UNKNOWN_METRIC:
                    unknown.append(name)
                else:  # absent this time, and a failure
                    self.metric_errors.append((name, returned))
                continue
            value = _plain(entry, "value")
            if not math.isnan(value):
                # NVML may overshoot 100 % by rounding: a ratio stays within 0..1
                values[name] = min(1.0, max(0.0, value / 100.0))
        if unknown:
            for name in unknown:
                del self._ids[name]
            self._request = self._build_request()
        pipes: dict[GpmPipe, float] = {
            pipe: values[pipe] for pipe in _PIPES if pipe in values}
        return GpmReading(
            window_seconds=window,
            engine_active_ratio=values.get("engine_active_ratio"),
            sm_active_ratio=values.get("sm_active_ratio"),
            sm_occupancy_ratio=values.get("sm_occupancy_ratio"),
            tensor_active_ratio=values.get("tensor_active_ratio"),
            dram_active_ratio=values.get("dram_active_ratio"),
            pipe_active_ratio=pipes,
        )

    def close(self) -> None:
        """Frees the sample buffers (before nvmlShutdown)."""
        for sample in self._samples:
            with contextlib.suppress(pynvml.NVMLError):  # NVML gone: nothing left to free
                pynvml.nvmlGpmSampleFree(sample)
        self._samples = []
        self._previous_at = None


@dataclass
class _Target:
    device: str
    gpu_instance_id: int | None  # labelled: a GPU instance with several compute instances
    sampler: Sampler
    what: str  # how the feature state names it
    stopped: bool = False  # the driver's answer will not change: not asked again
    error: Availability | None = None  # the last call's failure, None after a success

    def fail(self, exc: GpmError) -> None:
        self.error = exc.availability
        self.stopped = exc.sticky


class GpmDevice:
    """The GPM of one physical GPU: the GPU itself and each of its MIG GPU instances that
    has a compute instance. `migs`: (MIG device key, GPU instance id) of every MIG device.
    `availability` is this GPU's `nvidia.gpm` feature state, as of the last read."""

    def __init__(self, handle: Any, key: str,
                 migs: Sequence[tuple[str, int | None]] = ()) -> None:
        self.key = key
        self._handle = handle
        self._support = Availability.unavailable("GPM support not asked yet")
        # Held during every call: close() frees the samples only when no call (a hung
        # one, on a lane) can still be using them.
        self._lock = threading.Lock()
        self._closed = False
        self._targets = [_Target(key, None, Sampler(handle), "the GPU")]
        by_instance: dict[int, list[str]] = {}
        for mig_key, gi in migs:
            if gi is not None:
                by_instance.setdefault(gi, []).append(mig_key)
        for gi, keys in sorted(by_instance.items()):
            device, labelled = (keys[0], None) if len(keys) == 1 else (key, gi)
            self._targets.append(
                _Target(device, labelled, Sampler(handle, gi), f"GPU instance {gi}"))

    def rename(self, key: str) -> None:
        """The GPU is known by another key from now on (it shares its UUID with another
        GPU: `stack.distinct`)."""
        with self._lock:
            for target in self._targets:
                if target.device == self.key:
                    target.device = key
            self.key = key

    @property
    def availability(self) -> Availability:
        if self._support.state != "enabled":
            return self._support
        for target in self._targets:
            if target.error is not None:
                if len(self._targets) == 1:
                    return target.error
                return Availability.unavailable(f"{target.what}: {target.error.reason}",
                                                target.error.fix)
        return self._support

    def start(self, clock: Callable[[], float]) -> None:
        """Asks whether the GPU has GPM and takes each target's first sample (at
        discovery). Raises DeviceLost, NvmlGone."""
        with self._lock:
            self._support = support(self._handle)
            if self._support.state != "enabled":
                return
            for target in self._targets:
                try:
                    target.sampler.start(clock())
                except GpmError as exc:
                    target.fail(exc)
                else:
                    target.error = None

    def first_values_at(self) -> float | None:
        """When a target that has no values yet will have its first window (the first
        scrape waits for it rather than reporting nothing); None when none waits."""
        due = [t.sampler.first_window_at for t in self._targets if not t.stopped]
        return max((d for d in due if d is not None), default=None)

    def read(self, clock: Callable[[], float],
             failures: list[tuple[str, str]] | None = None) -> tuple[GpmSeries, ...]:
        """This scrape's values of every target that has some; a metric that failed with
        an unexpected error is absent and goes into `failures` (key, message). Raises
        DeviceLost, NvmlGone."""
        with self._lock:
            if self._closed or self._support.state != "enabled":
                return ()
            out = []
            for target in self._targets:
                if target.stopped:
                    continue
                try:
                    reading = target.sampler.read(clock)
                except GpmError as exc:
                    target.fail(exc)
                    continue
                target.error = None
                if reading is not None:
                    out.append(GpmSeries(target.device, target.gpu_instance_id, reading))
                for name, code in target.sampler.metric_errors:
                    if failures is not None:
                        failures.append((
                            f"{self.key}:gpm:{target.what}:{name}",
                            f"GPM metric {name} of {target.what} of {self.key} failed: "
                            f"{pynvml.NVMLError(code)}"))
                target.sampler.metric_errors = []  # reported once
            return tuple(out)

    def close(self) -> None:
        """Frees the samples (before nvmlShutdown), unless a call of this GPU has not
        returned: then they are left to it (a few hundred bytes, once per hung GPU)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            self._closed = True
            for target in self._targets:
                target.sampler.close()
        finally:
            self._lock.release()
