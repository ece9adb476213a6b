"""The custom Prometheus collector: runs every collector on each scrape, joins device
labels, adds resource labels and self-metrics, and never lets one failure fail the
scrape."""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import cast

from prometheus_client.core import Metric as PromMetric
from prometheus_client.registry import Collector as PromCollector
from prometheus_client.registry import CollectorRegistry

from gpu_exporter import __version__
from gpu_exporter.collectors import hw_gpu
from gpu_exporter.collectors.base import (
    Availability,
    Collector,
    CollectorUnavailable,
    Feature,
    FeatureState,
    Sink,
)
from gpu_exporter.collectors.inputs import ScrapeInputs
from gpu_exporter.model import catalogue as c
from gpu_exporter.model import process_energy
from gpu_exporter.model.labels import known
from gpu_exporter.model.logs import forget, log_once
from gpu_exporter.model.metric_types import Emitted
from gpu_exporter.model.records import VENDOR_ORDER, GpuReading
from gpu_exporter.model.settings import Settings
from gpu_exporter.model.worker import Busy, Job, Worker, run_here
from gpu_exporter.scrape import gcpause
from gpu_exporter.scrape.records import ScrapeRecords
from gpu_exporter.scrape.records import build_families as build_families
from gpu_exporter.scrape.records import prometheus_family as prometheus_family

log = logging.getLogger("gpu_exporter.exporter")

# Collectors get the scrape timeout less this margin, so that the merge and the HTTP
# response still fit in the scraper's own timeout.
_MARGIN_SECONDS = 0.25
_STAGGER_SECONDS = 0.02


def _nvml_bindings_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("nvidia-ml-py")
    except Exception:
        return None


@dataclass
class _Slot:
    collector: Collector
    availability: Availability
    worker: Worker
    last_start: float = field(default_factory=time.monotonic)

    def runs_here(self) -> bool:
        """Whether the collector runs on the scrape's thread this time: it is running
        (a start, tried again, may hang: nvmlInit on a lost GPU), its worker is not stuck
        in an earlier scrape, and it says it cannot hang now. A guarded() that raises
        counts as True: the worker then reports what went wrong."""
        if self.availability.state != "enabled" or self.worker.busy:
            return False
        try:
            return not self.collector.guarded()
        except Exception:
            return False


@dataclass
class ScrapeResult:
    records: ScrapeRecords | None  # None: no scrape was waiting for it
    finished: float


class _HandedOut:
    """`families` one by one; the pause ends once they are rendered: the iterator used
    up, or dropped, even before its first item (a generator's `finally` would not run
    then). The list goes first, so that its series are freed before collection is
    back."""

    def __init__(self, families: list[PromMetric]) -> None:
        self._it: Iterator[PromMetric] | None = iter(families)

    def __iter__(self) -> _HandedOut:
        return self

    def __next__(self) -> PromMetric:
        if self._it is not None:
            try:
                return next(self._it)
            except StopIteration:
                self._end()
        raise StopIteration

    def _end(self) -> None:
        if self._it is not None:
            self._it = None
            gcpause.PAUSE.end()

    def __del__(self) -> None:
        self._end()


class GpuExporterCollector(PromCollector):
    def __init__(
        self,
        settings: Settings,
        collector_classes: Sequence[type[Collector]],
    ) -> None:
        self.settings = settings
        self._slots: dict[str, _Slot] = {}
        self._classes = list(collector_classes)
        self._lock = threading.Lock()
        self._last: ScrapeResult | None = None
        self._waiting = 0  # scrapes waiting for self._lock (counted under _waiting_lock)
        self._waiting_lock = threading.Lock()
        self._told: dict[tuple[str, str | None], Availability] = {}  # feature states logged
        # Energy split among processes: counters kept from scrape to scrape.
        self._energy = process_energy.ProcessEnergy()
        self._build_labels = known(
            c.BuildLabels, version=__version__, python_version=platform.python_version(),
            nvml_bindings_version=_nvml_bindings_version())

    # -- life cycle ------------------------------------------------------------------
    def start(self) -> dict[str, Availability]:
        """Start every enabled collector; CollectorFault propagates (start-up fault)."""
        states: dict[str, Availability] = {}
        for cls in self._classes:
            if cls.name not in self.settings.enabled_collectors:
                states[cls.name] = Availability("disabled")
                continue
            collector = cls(self.settings)
            worker = Worker(cls.name)
            # Started on the thread that will collect (as later retries are): what start()
            # opens with per-thread state (a library's event loop, say) is then used
            # on the thread that made it, instead of leaking a new loop every scrape.
            job = worker.submit(partial(_start_collector, collector))
            job.done.wait()
            try:
                availability = job.outcome()
            except BaseException:
                worker.stop()
                raise
            self._slots[cls.name] = _Slot(collector, availability, worker)
            states[cls.name] = availability
        self._tell(self.availability())
        return states

    @property
    def collectors(self) -> Mapping[str, Collector]:
        """The collectors started, by name, as each scrape runs them."""
        return {name: slot.collector for name, slot in self._slots.items()}

    def close(self) -> None:
        for slot in self._slots.values():
            try:
                slot.collector.close()
            except Exception:
                log.exception("closing collector %s", slot.collector.name)
            slot.worker.stop()

    def availability(self) -> list[Feature]:
        """Every collector (its name) and, while it runs, each of its features
        (`<collector>.<feature>`, per device where they differ): the states that
        gpu_exporter_feature_status and `doctor` report."""
        out: list[Feature] = []
        for cls in self._classes:
            slot = self._slots.get(cls.name)
            if slot is None:
                out.append(Feature(cls.name, Availability.disabled(
                    "turned off", f"turn on with --collector.{cls.name}")))
                continue
            out.append(Feature(cls.name, slot.availability))
            if slot.availability.state == "enabled":
                out.extend(Feature(f"{cls.name}.{f.name}", f.availability, f.hw_id)
                           for f in slot.collector.features())
        return out

    def _tell(self, features: Sequence[Feature]) -> None:
        """Logs each feature's state when it first becomes, or stops being, off: once,
        with the reason and the fix, not every scrape."""
        for f in features:
            key = (f.name, f.hw_id)
            before = self._told.get(key)
            a = f.availability
            if before == a or (before is None and a.state == "enabled"):
                continue
            self._told[key] = a
            where = f" on {f.hw_id}" if f.hw_id else ""
            if a.state == "enabled":
                log.info("%s is now enabled%s", f.name, where)
            elif a.state == "unavailable":
                log.info("%s unavailable%s: %s%s", f.name, where, a.reason,
                         f" (fix: {a.fix})" if a.fix else "")

    # -- scrape ----------------------------------------------------------------------
    def describe(self) -> Iterator[PromMetric]:
        """Every family the exporter can emit (empty): the registry learns their names,
        so that a scrape's `name[]` filter finds this collector."""
        return (prometheus_family(fam) for fam in c.SCRAPE_FAMILIES)

    def collect(self) -> Iterator[PromMetric]:
        """One scrape as prometheus_client's families (`name[]`, OpenMetrics 2.0)."""
        arrived = time.monotonic()
        gcpause.PAUSE.begin()
        try:
            families = self._collect(arrived).families()
        except BaseException:
            gcpause.PAUSE.end()
            raise
        return _HandedOut(families)

    def collect_records(self) -> ScrapeRecords:
        """One scrape as records, for scrape/records_render.py (rendered in a GC pause)."""
        return self._collect(time.monotonic())

    def _collect(self, arrived: float) -> ScrapeRecords:
        # Concurrent scrapes share one collection: a scraper that waited for another
        # scrape which finished after it arrived takes that result. The records are
        # kept only while another scrape waits (one that has not counted itself yet
        # scrapes on its own): kept longer they would outlive the response and be
        # walked by the garbage collector until the next scrape.
        with self._waiting_lock:
            self._waiting += 1
        with self._lock:
            with self._waiting_lock:
                self._waiting -= 1
            last = self._last
            if last is not None and last.records is not None and last.finished >= arrived:
                return last.records
            records = self._scrape()
            with self._waiting_lock:
                self._last = ScrapeResult(records if self._waiting else None,
                                          time.monotonic())
        return records

    def _scrape(self) -> ScrapeRecords:
        budget = max(0.1, self.settings.scrape_timeout_seconds - _MARGIN_SECONDS)
        deadline = time.monotonic() + budget
        success: dict[str, bool] = {}
        duration: dict[str, float] = {}
        # A collector that may hang (guarded()) runs on its own persistent worker, handed
        # its job straight from this thread (no thread is started per scrape); one that
        # cannot runs right here, sparing the two hand-offs between threads that cost a
        # 1 Hz scrape more than its work (docs/performance.md, issue #34). Of those that
        # wait for devices in lanes until the deadline (a GPU hung in a call), this
        # thread runs one only, the last, once every other collector has started: two
        # such waits never add up. One collector starts when the one before it has
        # returned, or has run _STAGGER_SECONDS: collectors that answer quickly take
        # turns instead of taking the GIL from each other at every NVML call and system
        # call, and one that waits or hangs delays the others by that much only.
        pending: dict[str, tuple[_Slot, Job[bool], float]] = {}
        ended: dict[str, float] = {}  # when each collector returned
        inputs = ScrapeInputs()  # what the sources say this scrape, read once
        sinks = {name: Sink(name, deadline, inputs=inputs) for name in self._slots}
        here = {name: slot.runs_here() for name, slot in self._slots.items()}
        last = next((name for name, slot in reversed(self._slots.items())
                     if here[name] and slot.collector.waits_for_devices), None)
        previous: Job[bool] | None = None
        for name in [*(n for n in self._slots if n != last), *([last] if last else [])]:
            slot = self._slots[name]
            if previous is not None:
                previous.wait(min(_STAGGER_SECONDS, deadline - time.monotonic()))
            started = time.monotonic()
            if slot.availability.state == "unavailable" and (
                started - slot.last_start < self.settings.retry_interval_seconds
            ):
                # An unavailable collector is reported by its feature state; it has no
                # collector_success (it neither ran nor failed).
                continue
            run = partial(self._run_collector, slot, sinks[name], ended)
            if here[name] and (name == last or not slot.collector.waits_for_devices):
                pending[name] = (slot, run_here(run), started)
                continue
            try:
                job = slot.worker.submit(run)
            except Busy:
                log_once(log, f"{name}:busy", logging.WARNING,
                         "collector %s is still stuck in an earlier scrape", name)
                success[name] = False
                duration[name] = time.monotonic() - started
                continue
            pending[name] = (slot, job, started)
            previous = job
        for name, (slot, job, started) in pending.items():
            if job.wait(deadline - time.monotonic()):
                ok = self._finished(slot, sinks[name], job)
                if ok is not None:
                    success[name] = ok
                duration[name] = ended.get(name, time.monotonic()) - started
            else:
                log_once(log, f"{name}:timeout", logging.WARNING,
                         "collector %s did not finish within the scrape timeout", name)
                success[name] = False
                duration[name] = time.monotonic() - started
                sinks[name] = Sink(name, deadline)  # whatever it wrote is dropped
        return self.merge(sinks, success, duration)

    def _run_collector(self, slot: _Slot, sink: Sink, ended: dict[str, float]) -> bool:
        """On the collector's worker (or the scrape's thread, see _Slot.runs_here): start it
        again when due, then collect. True when it collected (False: still
        unavailable)."""
        try:
            if slot.availability.state == "unavailable":
                self._retry_start(slot)
            if slot.availability.state != "enabled":
                return False
            slot.collector.collect(sink)
            return True
        finally:
            ended[slot.collector.name] = time.monotonic()

    def _finished(self, slot: _Slot, sink: Sink, job: Job[bool]) -> bool | None:
        """collector_success of a collector whose job returned: None when it did not
        collect (still, or now, unavailable)."""
        name = slot.collector.name
        ok: bool | None = False
        try:
            if job.outcome():
                ok = not sink.failures
                for key, message in sink.failures:
                    log_once(log, f"{name}:{key}", logging.WARNING, "%s: %s", name, message)
            else:
                ok = None  # still unavailable: its feature state says so
        except CollectorUnavailable as exc:
            slot.availability = Availability.unavailable(str(exc), exc.fix)
            slot.last_start = time.monotonic()
            log.info("collector %s is now unavailable: %s", name, exc)
            ok = None
        except Exception as exc:
            log_once(log, f"{name}:{type(exc).__name__}", logging.ERROR,
                     "collector %s failed: %s", name, exc)
        else:
            if ok:
                forget(log, f"{name}:busy")
                forget(log, f"{name}:timeout")
        return ok

    def _retry_start(self, slot: _Slot) -> None:
        now = time.monotonic()
        if now - slot.last_start < self.settings.retry_interval_seconds:
            return
        slot.last_start = now
        # a change is logged by _tell
        slot.availability = _start_collector(slot.collector)

    # -- rendering -------------------------------------------------------------------
    def merge(
        self, sinks: Mapping[str, Sink], success: Mapping[str, bool],
        duration: Mapping[str, float],
    ) -> ScrapeRecords:
        """One scrape's records from what each collector wrote (by collector name),
        whether it succeeded and how long it took: device labels joined, energy
        attributed, self-metrics added."""
        gpus: list[GpuReading] = [g for s in sinks.values() for g in s.gpus]
        dev_labels = assign_device_labels(gpus)
        # Samples may name their device by PCI address too (DRM fdinfo knows no hw_id).
        # The alias is the same dict, so labels added by PCI address (the kubelet names
        # AMD GPUs that way) reach the device's series as well.
        for g in gpus:
            pci = g.identity.pci_address
            if pci and g.identity.parent_hw_id is None and pci not in dev_labels:
                dev_labels[pci] = dev_labels[g.identity.key]
        for sink in sinks.values():
            for hw_id, extra in sink.device_labels.items():
                if hw_id in dev_labels:
                    dev_labels[hw_id].update(cast("Mapping[str, str]", extra))
        own = Emitted()
        # Each GPU's energy split among the processes the processes collector found on
        # it (docs/attribution.md). A scrape where it could not read them (it timed out:
        # its sink is empty) counts as no_activity_data for the GPUs it read before.
        consumers = {device: found for s in sinks.values()
                     for device, found in s.consumers.items()}
        process_energy.emit(self._energy.update(gpus, consumers), own)
        self._emit_self(own, success, duration)
        return ScrapeRecords((*sinks.values(), own), dev_labels,
                             dict(self.settings.resource_labels))

    def _emit_self(
        self, out: Emitted, success: Mapping[str, bool], duration: Mapping[str, float]
    ) -> None:
        c.BUILD_INFO.emit(out, 1, self._build_labels)
        for name in sorted(success):
            c.COLLECTOR_SUCCESS.emit(out, 1 if success[name] else 0, {"collector": name})
            c.COLLECTOR_DURATION.emit(out, duration.get(name, 0.0), {"collector": name})
        features = self.availability()
        self._tell(features)
        for f in sorted(features, key=lambda f: (f.name, f.hw_id or "")):
            for state in _FEATURE_STATES:
                labels: c.FeatureLabels = {"feature": f.name, "state": state}
                if f.hw_id is not None:
                    labels["hw_id"] = f.hw_id
                c.FEATURE_STATUS.emit(out, 1 if f.availability.state == state else 0, labels)


_FEATURE_STATES: tuple[FeatureState, ...] = ("enabled", "unavailable", "disabled")


def _start_collector(collector: Collector) -> Availability:
    """collector.start(), a file it may not read (a mode-000 sysfs folder, a procfs the
    exporter's user cannot see) making it unavailable with that reason instead of
    stopping the exporter; start() is tried again every retry interval."""
    try:
        return collector.start()
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        return Availability.unavailable(
            f"cannot read{where}: {exc.strerror or exc}",
            "give the exporter's user read access to it, or run the exporter as a user "
            "that has it" if isinstance(exc, PermissionError)
            else "check the path flags (--path.sysfs, --path.procfs) and the file")


def assign_device_labels(gpus: Sequence[GpuReading]) -> dict[str, dict[str, str]]:
    """gpu_index: NVIDIA by NVML index, then AMD, then Intel by PCI address; a MIG
    instance shares its parent's index."""
    physical = [g for g in gpus if g.identity.parent_hw_id is None]
    physical.sort(key=lambda g: (VENDOR_ORDER[g.identity.vendor], g.identity.order_key))
    index = {g.identity.key: i for i, g in enumerate(physical)}
    labels: dict[str, dict[str, str]] = {}
    for g in gpus:
        parent = g.identity.parent_hw_id
        i = index.get(parent if parent is not None else g.identity.key, -1)
        # A plain dict from here on: the pod labels of the device are merged into it.
        labels[g.identity.key] = cast("dict[str, str]", hw_gpu.device_labels(g, i))
    return labels


def make_registry(exporter: GpuExporterCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    return registry
