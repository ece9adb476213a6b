"""The small interface every collector implements, and what it writes into."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from gpu_exporter.collectors import hw_gpu
from gpu_exporter.collectors.inputs import ScrapeInputs
from gpu_exporter.model.attribution import Consumer

# Availability, Feature, FeatureState and device_features live in the bottom layer
# (gpu_exporter.model.features), where the sources under nvml/ import them; collectors take
# them from here, with the rest of their interface.
from gpu_exporter.model.features import Availability as Availability
from gpu_exporter.model.features import Feature as Feature
from gpu_exporter.model.features import FeatureState as FeatureState
from gpu_exporter.model.features import device_features as device_features
from gpu_exporter.model.labels import PodLabels
from gpu_exporter.model.metric_types import Emitted
from gpu_exporter.model.process_energy import ProcessKey
from gpu_exporter.model.records import GpuReading
from gpu_exporter.model.settings import Option, Settings


class CollectorFault(Exception):
    """A collector cannot start for a reason the operator must fix (e.g. a BPF program
    that fails to load). Start-up stops with this one line, exit 4."""


class CollectorUnavailable(Exception):
    """Raised by collect() when its source went away as a whole (e.g. the driver was
    unloaded): the collector becomes unavailable with this message as the reason (and
    `fix` as the fix) and start() is tried again every retry interval."""

    def __init__(self, reason: str, fix: str = "") -> None:
        super().__init__(reason)
        self.fix = fix


@dataclass
class Sink(Emitted):
    """What one collector produces during one scrape: its samples, emitted through the
    catalogue's families (`c.HW_GPU_UP.emit(sink, 1, {}, device=key)`), the devices it
    reports, and what it could not read."""

    collector: str
    deadline: float  # time.monotonic() by which collect() must return
    gpus: list[GpuReading] = field(default_factory=list)
    device_labels: dict[str, PodLabels] = field(default_factory=dict)
    failures: list[tuple[str, str]] = field(default_factory=list)
    # What the sources say this scrape, read once for every collector that needs it (DRM
    # fdinfo, accel holders, NVML's process lists): one per scrape, made by the scrape
    # layer, the same in each Sink.
    inputs: ScrapeInputs = field(default_factory=ScrapeInputs)
    # The processes on each device whose list was read this scrape (None: not readable),
    # by device key: what the exporter splits each GPU's energy among (process_energy).
    consumers: dict[str, Sequence[Consumer[ProcessKey]] | None] = field(default_factory=dict)

    def gpu(self, reading: GpuReading) -> None:
        """One device: its hw_gpu_* samples (`hw_gpu`), and its identity for the
        device labels the exporter joins into every series naming it."""
        self.gpus.append(reading)
        hw_gpu.emit(reading, self)

    def label_device(self, hw_id: str, labels: PodLabels) -> None:
        """Extra labels for every series of one device (e.g. the Kubernetes pod)."""
        self.device_labels[hw_id] = labels

    def fail(self, key: str, message: str) -> None:
        """Something this collector should have read could not be: the value is absent,
        collector_success is 0 this scrape, and `message` is logged once per key."""
        self.failures.append((key, message))

    def time_left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


class Collector(ABC):
    """One data source. Subclasses live one per module in this package and are
    registered in `gpu_exporter.collectors.REGISTRY`."""

    name: ClassVar[str]
    help: ClassVar[str]
    default_enabled: ClassVar[bool] = True
    # Collectors that report devices run the same scrape as those that label them; all
    # device labels are joined after every collector has returned.
    options: ClassVar[Sequence[Option[Any]]] = ()
    # collect() may wait for devices until the scrape's deadline (a GPU hung in a call
    # run in lanes): the scrape's own thread runs at most one such collector (see
    # guarded()), so that two such waits never add up.
    waits_for_devices: ClassVar[bool] = False

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @abstractmethod
    def start(self) -> Availability:
        """Probe and prepare once at start-up (and again later while unavailable).
        Returns unavailable with a reason instead of raising for missing libraries,
        devices or privileges; raises CollectorFault only for operator errors."""

    @abstractmethod
    def collect(self, sink: Sink) -> None:
        """Read everything once and write it into `sink`. Must not raise for a single
        bad device or field (use sink.fail); an exception marks the collector failed."""

    def guarded(self) -> bool:
        """Whether this scrape's collect() may make a call that can hang with no
        deadline of its own (a library's start, a GPU driver's file, ACPI firmware, a
        network filesystem): it then runs on a worker of its own, and a hang costs only
        its series. False: it runs on the scrape's own thread, which saves the hand-offs
        between threads that dominate a 1 Hz scrape's cost (docs/performance.md, issue
        #34). Asked before every scrape; True unless the collector knows better."""
        return True

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (threads, probes, library handles)."""

    def features(self) -> Sequence[Feature]:
        """Optional parts that can be unavailable on their own while the collector runs
        (the kubelet API that names pods, XID events of one GPU): reported as
        gpu_exporter_feature_status{feature="<collector>.<name>"[, hw_id]} and by
        `doctor`. A function the driver lacks is a feature state, never a failure."""
        return ()
