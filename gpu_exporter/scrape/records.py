"""One scrape as the exporter's own records, and prometheus_client's families of them.

`ScrapeRecords` is what a scrape hands the renderer: what every collector emitted
(`Emitted`, per family), the device labels (by device key) and the resource labels.
scrape/records_render.py writes the exposition from it without building a
prometheus_client `Sample` per series; `families()` (`build_families`) is the library's
path (`name[]` filters, OpenMetrics 2.0, `Collector.collect()`) and the test oracle of
that renderer.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.core import Metric as PromMetric
from prometheus_client.core import Sample as PromSample

from gpu_exporter.model import metric_types
from gpu_exporter.model.metric_types import Emitted, Family, HistogramSeries, Kind, Series

# A family, its scalar series and its histogram series, each a list per Emitted.
Grouped = tuple[Family[Any], list[list[Series]], list[list[HistogramSeries]]]


@dataclass(frozen=True)
class ScrapeRecords:
    """One scrape's series as emitted. `device_labels`: each device key's labels
    (resource labels not included); a series naming a device that is not there is
    dropped. `resource`: the labels every series carries."""

    emitted: Sequence[Emitted]
    device_labels: Mapping[str, Mapping[str, str]]
    resource: Mapping[str, str]

    def grouped(self) -> list[Grouped]:
        """Every family emitted, in catalogue order, with its series from each Emitted."""
        scalars: dict[Family[Any], list[list[Series]]] = defaultdict(list)
        histograms: dict[Family[Any], list[list[HistogramSeries]]] = defaultdict(list)
        for e in self.emitted:
            for fam, series in e.scalars.items():
                scalars[fam].append(series)
            for fam, hseries in e.histograms.items():
                histograms[fam].append(hseries)
        return [(fam, scalars.get(fam, []), histograms.get(fam, []))
                for fam in sorted(scalars.keys() | histograms.keys(), key=lambda f: f.order)]

    def families(self) -> list[PromMetric]:
        """prometheus_client's families of these records (`build_families`)."""
        return build_families(self.emitted, self.device_labels, self.resource)


def prometheus_family(fam: Family[Any]) -> PromMetric:
    if fam.kind is Kind.COUNTER:
        return CounterMetricFamily(fam.name, fam.help, unit=fam.unit)
    if fam.kind is Kind.HISTOGRAM:
        return HistogramMetricFamily(fam.name, fam.help, unit=fam.unit)
    return GaugeMetricFamily(fam.name, fam.help, unit=fam.unit)


def build_families(
    emitted: Sequence[Emitted],
    device_labels: Mapping[str, Mapping[str, str]],
    resource_labels: Mapping[str, str],
) -> list[PromMetric]:
    """prometheus_client families of everything emitted, in catalogue order. Label order
    is resource, then device, then the sample's own; each device's labels are joined to
    the resource labels once per scrape, not once per sample."""
    resource = dict(resource_labels)
    joined = {key: {**resource, **dev} for key, dev in device_labels.items()}
    out: list[PromMetric] = []
    for fam, scalars, histograms in ScrapeRecords(emitted, device_labels, resource).grouped():
        prom = prometheus_family(fam)
        if scalars:
            _add_scalars(prom.samples, fam.name, scalars, joined, resource)
        if histograms:
            add_histograms(prom, fam, histograms, joined, resource)
        if not prom.samples:
            continue  # every sample named a device no collector reported this scrape
        if metric_types.CHECK_LABELS:
            for sample in prom.samples:
                fam.check({k: v for k, v in sample.labels.items() if k != "le"}, resource)
        out.append(prom)
    return out


def _add_scalars(
    samples: list[PromSample], name: str, lists: list[list[Series]],
    joined: Mapping[str, dict[str, str]], resource: dict[str, str],
) -> None:
    # The loop of every scrape over every series: names bound locally.
    new, append, device_base = PromSample, samples.append, joined.get
    for series in lists:
        for own, value, device in series:
            if device is not None:
                base = device_base(device)
                if base is None:
                    continue  # a sample for a device no collector reported this scrape
                # Series without labels of their own share their device's dict (the
                # renderer only reads it).
                labels = {**base, **own} if own else base
            elif own:
                labels = {**resource, **own} if resource else own  # type: ignore[assignment]
            else:
                labels = resource
            append(new(name, labels, value))


def add_histograms(
    prom: PromMetric, fam: Family[Any], lists: list[list[HistogramSeries]],
    joined: Mapping[str, dict[str, str]], resource: dict[str, str],
) -> None:
    # prometheus_client writes a histogram's _bucket/_count/_sum for one set of label
    # names at a time: one family per label set, their samples gathered into one.
    by_names: dict[tuple[str, ...], HistogramMetricFamily] = {}
    for series in lists:
        for own, buckets, sum_value, device in series:
            if device is not None:
                base = joined.get(device)
                if base is None:
                    continue
                labels = {**base, **own}
            else:
                labels = {**resource, **own}
            names = tuple(labels)
            h = by_names.get(names)
            if h is None:
                h = by_names[names] = HistogramMetricFamily(
                    fam.name, fam.help, labels=names, unit=fam.unit)
            h.add_metric(list(labels.values()),
                         [(_fmt_bound(bound), count) for bound, count in buckets], sum_value)
    for h in by_names.values():
        prom.samples.extend(h.samples)


def _fmt_bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))
