"""The custom Prometheus collector: runs every collector on each scrape, joins device
labels, adds resource labels and self-metrics, and never lets one failure fail the
scrape."""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from prometheus_client.metrics_core import Metric as PromMetric
from prometheus_client.registry import Collector as PromCollector
from prometheus_client.registry import CollectorRegistry
from prometheus_client.samples import Sample as PromSample

from gpu_exporter import __version__, device_families
from gpu_exporter import catalogue as c
from gpu_exporter.collectors.base import (
    Availability,
    Collector,
    CollectorUnavailable,
    Feature,
    HistogramSample,
    Sample,
    Shared,
    Sink,
)
from gpu_exporter.logs import forget, log_once
from gpu_exporter.records import VENDOR_ORDER, GpuReading
from gpu_exporter.settings import Settings
from gpu_exporter.worker import Busy, Job, Worker

log = logging.getLogger("gpu_exporter.exporter")

# Collectors get the scrape timeout less this margin, so that the merge and the HTTP
# response still fit in the scraper's own timeout.
_MARGIN_SECONDS = 0.25


def _nvml_bindings_version() -> str:
    try:
        from importlib.metadata import version

        return version("nvidia-ml-py")
    except Exception:
        return ""


@dataclass
class _Slot:
    collector: Collector
    availability: Availability
    worker: Worker
    last_start: float = field(default_factory=time.monotonic)


@dataclass
class ScrapeResult:
    families: list[PromMetric]
    finished: float


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
        self._told: dict[tuple[str, str | None], Availability] = {}  # feature states logged
        self._build_labels = {
            "version": __version__,
            "python_version": platform.python_version(),
            "nvml_bindings_version": _nvml_bindings_version(),
        }

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
            # opens with per-thread state (pyroute2's event loop, for one) is then used
            # on the thread that made it, instead of leaking a new loop every scrape.
            job = worker.submit(collector.start)
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
    def collect(self) -> Iterator[PromMetric]:
        arrived = time.monotonic()
        # Concurrent scrapes share one collection: a scraper that waited for another
        # scrape which finished after it arrived takes that result.
        with self._lock:
            if self._last is not None and self._last.finished >= arrived:
                return iter(self._last.families)
            result = ScrapeResult(self._scrape(), time.monotonic())
            self._last = result
        return iter(result.families)

    def _scrape(self) -> list[PromMetric]:
        budget = max(0.1, self.settings.scrape_timeout_seconds - _MARGIN_SECONDS)
        deadline = time.monotonic() + budget
        sinks: dict[str, Sink] = {}
        success: dict[str, bool] = {}
        duration: dict[str, float] = {}
        # Start them all, then wait: each collector runs on its own persistent worker,
        # handed its job straight from this thread (no thread is started per scrape).
        pending: dict[str, tuple[_Slot, Job[bool], float]] = {}
        ended: dict[str, float] = {}  # by the workers: when each collector returned
        shared = Shared()  # what one collector reads for all of this scrape
        for name, slot in self._slots.items():
            sink = Sink(name, deadline, shared=shared)
            sinks[name] = sink
            started = time.monotonic()
            if slot.availability.state == "unavailable" and (
                started - slot.last_start < self.settings.retry_interval_seconds
            ):
                # An unavailable collector is reported by its feature state; it has no
                # collector_success (it neither ran nor failed).
                continue
            try:
                job = slot.worker.submit(partial(self._run_on_worker, slot, sink, ended))
            except Busy:
                log_once(log, f"{name}:busy", logging.WARNING,
                         "collector %s is still stuck in an earlier scrape", name)
                success[name] = False
                duration[name] = time.monotonic() - started
                continue
            pending[name] = (slot, job, started)
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
        return self._render(sinks, success, duration)

    def _run_on_worker(self, slot: _Slot, sink: Sink, ended: dict[str, float]) -> bool:
        """On the collector's worker: start it again when due, then collect. True when
        it collected (False: still unavailable)."""
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
        slot.availability = slot.collector.start()  # a change is logged by _tell

    # -- rendering -------------------------------------------------------------------
    def _render(
        self, sinks: Mapping[str, Sink], success: Mapping[str, bool],
        duration: Mapping[str, float],
    ) -> list[PromMetric]:
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
                    dev_labels[hw_id].update(extra)
        samples: list[Sample] = [s for g in gpus for s in device_families.samples(g)]
        histograms: list[HistogramSample] = []
        for sink in sinks.values():
            samples.extend(sink.samples)
            histograms.extend(sink.histograms)
        samples.extend(self._self_samples(success, duration))
        return build_families(samples, histograms, dev_labels, self.settings.resource_labels)

    def _self_samples(
        self, success: Mapping[str, bool], duration: Mapping[str, float]
    ) -> Iterable[Sample]:
        yield Sample(c.BUILD_INFO, self._build_labels, 1)
        for name in sorted(success):
            yield Sample(c.COLLECTOR_SUCCESS, {"collector": name}, 1 if success[name] else 0)
            yield Sample(c.COLLECTOR_DURATION, {"collector": name}, duration.get(name, 0.0))
        features = self.availability()
        self._tell(features)
        for f in sorted(features, key=lambda f: (f.name, f.hw_id or "")):
            own = {"feature": f.name} if f.hw_id is None else {"feature": f.name,
                                                               c.HW_ID: f.hw_id}
            for state in ("enabled", "unavailable", "disabled"):
                yield Sample(c.FEATURE_STATUS, {**own, "state": state},
                             1 if f.availability.state == state else 0)


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
        labels[g.identity.key] = device_families.device_labels(g, i)
    return labels


def build_families(
    samples: Iterable[Sample],
    histograms: Iterable[HistogramSample],
    device_labels: Mapping[str, Mapping[str, str]],
    resource_labels: Mapping[str, str],
) -> list[PromMetric]:
    families: dict[str, PromMetric] = {}
    # Label order is resource, then device, then the sample's own. Each device's labels
    # are joined to the resource labels once per scrape, not once per sample.
    resource = dict(resource_labels)
    joined = {hw_id: {**resource, **dev} for hw_id, dev in device_labels.items()}

    def family(metric: c.Metric) -> PromMetric:
        fam = families.get(metric.name)
        if fam is None:
            fam = PromMetric(metric.family_name, metric.help, metric.kind.value, metric.unit)
            families[metric.name] = fam
        return fam

    def labels_of(own: Mapping[str, str], device: str | None) -> dict[str, str] | None:
        if device is None:
            return {**resource, **own}
        base = joined.get(device)
        if base is None:
            return None  # a sample for a device no collector reported this scrape
        return {**base, **own}

    get = families.get
    new = tuple.__new__
    no_extras = (None,) * (len(PromSample._fields) - 3)  # timestamp, exemplar, ...
    for s in samples:
        device = s.device
        own = s.labels
        if device is not None:
            base = joined.get(device)
            if base is None:
                continue  # a sample for a device no collector reported this scrape
            labels = {**base, **own}
        elif resource or type(own) is not dict:
            labels = {**resource, **own}
        else:
            labels = own  # nothing to join: the sample's own dict, read only from here on
        metric = s.metric
        fam = get(metric.name)
        if fam is None:
            fam = family(metric)
        # What PromMetric.add_sample appends, without its call and NamedTuple's __new__.
        fam.samples.append(new(PromSample, (metric.name, labels, s.value, *no_extras)))
    for h in histograms:
        hlabels = labels_of(h.labels, h.device)
        if hlabels is None:
            continue
        fam = family(h.metric)
        out = fam.samples
        name = h.metric.name
        count = 0.0
        for bound, cumulative in h.buckets:
            le = "+Inf" if bound == float("inf") else _fmt_bound(bound)
            out.append(PromSample(name + "_bucket", {**hlabels, "le": le}, cumulative))
            count = cumulative
        out.append(PromSample(name + "_count", hlabels, count))
        out.append(PromSample(name + "_sum", hlabels, h.sum_value))
    by_order = defaultdict(int, {m.name: i for i, m in enumerate(c.CATALOGUE)})
    return sorted(families.values(), key=lambda f: by_order[_catalogue_name(f)])


def _catalogue_name(fam: PromMetric) -> str:
    return fam.name + "_total" if fam.type == "counter" else fam.name


def _fmt_bound(bound: float) -> str:
    return repr(float(bound))


def make_registry(exporter: GpuExporterCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    return registry
