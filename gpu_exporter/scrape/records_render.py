"""The exposition of a scrape's own records (`ScrapeRecords`), written by
scrape/render.py's TextRenderer without a prometheus_client `Sample` or a merged label
dict per series: a series seen in the previous render is found by its sample name, an id
of its device's labels (resource labels included) and its own label names and values,
and gets that render's line back (its value written again only when it changed). The
merged labels and the line prefix are made only for a series not seen before, with the
renderer's own maker, so the bytes are those prometheus_client writes for the same
families (`ScrapeRecords.families()`, the oracle: tests/core/test_records_render.py).

A device's id stands for the exact labels it had when first seen: labels that change
(pod labels, gpu_index) get a new id, never an old series' line.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, cast, runtime_checkable

from prometheus_client.core import Metric as PromMetric
from prometheus_client.utils import floatToGoString

from gpu_exporter.model import metric_types
from gpu_exporter.model.metric_types import Family, HistogramSeries, Series
from gpu_exporter.scrape.records import ScrapeRecords, add_histograms, prometheus_family

_go_float = cast(Callable[[float], str], floatToGoString)

# key, line prefix (`name{labels} `), the value last written, that line
Entry = tuple[tuple[Any, ...], str, object, str]
Make = Callable[[str, dict[str, str]], str]
# (name, labels, value) -> a line, through the render's own table (histogram samples)
Line = Callable[[str, dict[str, str], Any], str]
_Token = tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...] | None]
# Device label sets remembered (a node has at most a few dozen devices at a time).
MAX_DEVICE_LABEL_SETS = 1024


def with_value(entry: Entry, value: Any) -> Entry:
    """A cached line with `value`: the same entry when its value is that one, else its
    prefix with the value written again. Equal numbers are one text, except 0.0 and -0.0
    (equal, written apart): a zero is reused only as the same object. NaN is never
    equal."""
    if value is entry[2] or (value == entry[2] and value):
        return entry
    return entry[0], entry[1], value, f"{entry[1]}{_go_float(value)}\n"


@runtime_checkable
class RecordSource(Protocol):
    """A collector in the registry that hands its scrape over as records."""

    def collect_records(self) -> ScrapeRecords: ...


class RecordWriter:
    """Writes records through one render's line table (`previous`, `current`: the
    TextRenderer's `_Round`). Holds the ids of the device label sets seen (at most
    MAX_DEVICE_LABEL_SETS) and each family's header per format and escaping (at most the
    catalogue's families, eight times)."""

    def __init__(self) -> None:
        self._ids: dict[_Token, int] = {}
        self._count = itertools.count()
        self._headers: dict[tuple[str, str, Family[Any]], str] = {}

    def header(self, fam: Family[Any], kind: str, escaping: str,
               make: Callable[[PromMetric, str], str]) -> str:
        key = kind, escaping, fam
        text = self._headers.get(key)
        if text is None:
            text = self._headers[key] = make(prometheus_family(fam), escaping)
        return text

    def _devices(self, records: ScrapeRecords, resource: dict[str, str],
                 ) -> tuple[dict[str | None, int], dict[int, dict[str, str]]]:
        """Each device key's id (None: no device, the resource labels alone) and each
        id's labels: the resource labels, then the device's."""
        res_items = tuple(resource.items())
        known = self._ids
        id_of: dict[str | None, int] = {}
        base_of: dict[int, dict[str, str]] = {}
        devices: Iterator[tuple[str | None, Mapping[str, str] | None]] = itertools.chain(
            ((None, None),), records.device_labels.items())
        for key, dev in devices:
            token: _Token = res_items, None if dev is None else tuple(dev.items())
            i = known.get(token)
            if i is None:
                # Kept across renders and across the registry's collectors (each writes
                # its own records); labels that keep changing (pods come and go) are
                # forgotten all at once at the bound, their series made again once.
                if len(known) >= MAX_DEVICE_LABEL_SETS:
                    known.clear()
                i = known[token] = next(self._count)
            id_of[key] = i
            if i not in base_of:
                base_of[i] = resource if dev is None else {**resource, **dev}
        return id_of, base_of

    def write(self, records: ScrapeRecords, previous: Mapping[tuple[Any, ...], Entry],
              current: dict[tuple[Any, ...], Entry], make: Make, line: Line,
              header: Callable[[Family[Any]], str], out: list[str]) -> None:
        resource = dict(records.resource)
        id_of, base_of = self._devices(records, resource)
        joined: dict[str, dict[str, str]] | None = None
        for fam, scalars, histograms in records.grouped():
            start = len(out)
            out.append(header(fam))
            if scalars:
                _scalars(fam, scalars, id_of, base_of, resource, previous, current, make,
                         out)
            if histograms:
                if joined is None:
                    joined = {key: base_of[id_of[key]] for key in records.device_labels}
                _histograms(fam, histograms, joined, resource, line, out)
            if len(out) == start + 1:
                out.pop()  # every sample named a device no collector reported


def _scalars(fam: Family[Any], lists: list[list[Series]], id_of: dict[str | None, int],
             base_of: dict[int, dict[str, str]], resource: dict[str, str],
             previous: Mapping[tuple[Any, ...], Entry],
             current: dict[tuple[Any, ...], Entry], make: Make, out: list[str]) -> None:
    # The loop of every scrape over every series: names bound locally.
    name, device_id, prev_get, cur_get = fam.name, id_of.get, previous.get, current.get
    append, check = out.append, metric_types.CHECK_LABELS
    for series in lists:
        for own, value, device in series:
            dev = device_id(device)
            if dev is None:
                continue  # a sample for a device no collector reported this scrape
            key = (name, dev, *own, *own.values()) if own else (name, dev)
            entry = prev_get(key) or cur_get(key)
            if entry is None:
                base = base_of[dev]
                labels = {**base, **own} if own else base
                if check:
                    fam.check({k: v for k, v in labels.items() if k != "le"}, resource)
                prefix = make(name, labels)
                entry = key, prefix, value, f"{prefix}{_go_float(value)}\n"
            else:
                entry = with_value(entry, value)
            current[entry[0]] = entry
            append(entry[3])


def _histograms(fam: Family[Any], lists: list[list[HistogramSeries]],
                joined: dict[str, dict[str, str]], resource: dict[str, str], line: Line,
                out: list[str]) -> None:
    """Few series (the eBPF collector's): their samples made as build_families makes
    them, so the `_bucket`/`_count`/`_sum` order and `le` text are the library's."""
    prom = prometheus_family(fam)
    add_histograms(prom, fam, lists, joined, resource)
    for s in prom.samples:
        if metric_types.CHECK_LABELS:
            fam.check({k: v for k, v in s.labels.items() if k != "le"}, resource)
        out.append(line(s.name, s.labels, s.value))
