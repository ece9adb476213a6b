"""The text expositions of a registry, byte for byte what prometheus_client writes
(`generate_latest` for text 0.0.4, `openmetrics.exposition.generate_latest` for
OpenMetrics 1.0.0), but reusing each series' line from the previous render: at one
scrape a second most label sets do not change, and escaping and joining them was most
of the rendering's time; the value is written again only when it changed (many do not:
info and state series, limits, idle counters), which is most of what is left.

Only the default negotiation comes here (text 0.0.4, or the OpenMetrics 1.0.0 that
Prometheus asks for, with neither `escaping=` nor `name[]`); every other variant is
prometheus_client's own (gpu_exporter/http/app.py). Equality with prometheus_client is
tested on the goldens and on randomised families (tests/core/test_render.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as om
from prometheus_client.openmetrics.exposition import escape_label_name, escape_metric_name
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from gpu_exporter.scrape.gcpause import PAUSE

_go_float = cast(Callable[[float], str], floatToGoString)

_U = "underscores"  # prometheus_client's default escaping for names
_SUFFIXES = ("_created", "_gsum", "_gcount")  # moved to gauges of their own at the end
_TYPES = {"counter": "counter", "info": "gauge", "stateset": "gauge",
          "gaugehistogram": "histogram", "unknown": "untyped"}
_NAME_SUFFIX = {"counter": "_total", "info": "_info"}

_Key = tuple[str, ...]  # the name, the label names, the label values: one flat tuple
# key, line prefix (`name{labels} `), the value last written, that line
_Entry = tuple[_Key, str, object, str]


def _value(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def _prefix(name: str, labels: dict[str, str]) -> str:
    """`name{k="v",...} `, as prometheus_client writes a sample line up to its value."""
    if not labels:
        return f"{name} "
    text = ",".join(f'{escape_label_name(k, _U)}="{_value(v)}"' for k, v in sorted(labels.items()))
    return f"{name}{{{text}}} "


def _text_prefix(name: str, labels: dict[str, str]) -> str:
    return _prefix(escape_metric_name(name, _U), labels)


def _openmetrics_prefix(name: str, labels: dict[str, str]) -> str:
    # OpenMetrics escapes a sample's name as a label name (a ':' becomes '_').
    return _prefix(escape_label_name(name, _U), labels)


def _help(name: str, documentation: str, mtype: str) -> str:
    doc = documentation.replace("\\", r"\\").replace("\n", r"\n")
    name = escape_metric_name(name, _U)
    return f"# HELP {name} {doc}\n# TYPE {name} {mtype}\n"


class _Round:
    """One render's lines: a series whose labels and value are those of the previous
    render gets that render's line back; one whose value changed keeps its line prefix
    (name and label text) and writes the value; a new one is made. Renders on several
    threads at once each have their own round; the last to finish leaves its lines to
    the next."""

    def __init__(self, make: Callable[[str, dict[str, str]], str],
                 previous: dict[_Key, _Entry]) -> None:
        self.make, self.previous = make, previous
        self.current: dict[_Key, _Entry] = {}

    def line(self, name: str, labels: dict[str, str], value: Any) -> str:
        key = (name, *labels, *labels.values())
        entry = self.previous.get(key) or self.current.get(key)
        if entry is None:
            # The entry's own key object is kept, not this scrape's equal one: what the
            # cache holds then dates from the scrape that first saw the series, instead
            # of pinning the memory of every scrape (a high-water after a burst of
            # concurrent scrapes).
            prefix = self.make(name, labels)
            entry = key, prefix, value, f"{prefix}{_go_float(value)}\n"
        # Equal numbers are one float and so one text, except 0.0 and -0.0 (equal,
        # written apart): a zero is reused only as the same object. NaN is never equal.
        elif value is not entry[2] and (value != entry[2] or not value):
            entry = entry[0], entry[1], value, f"{entry[1]}{_go_float(value)}\n"
        self.current[entry[0]] = entry
        return entry[3]


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def _paused(render: Callable[[Collector], bytes], registry: Collector) -> bytes:
    """`render(registry)` with cyclic collection held off until the families and this
    render's keys are freed (`gcpause`): its thousands of small tuples would otherwise
    set off young collections that walk the live families, several per render."""
    PAUSE.begin()
    try:
        return render(registry)
    finally:
        PAUSE.end()


class TextRenderer:
    """`render(registry)` equals prometheus_client's `generate_latest(registry)`;
    `render_openmetrics(registry)` its OpenMetrics 1.0.0 `generate_latest(registry)`."""

    def __init__(self) -> None:
        self._text: dict[_Key, _Entry] = {}
        self._openmetrics: dict[_Key, _Entry] = {}

    def render(self, registry: Collector) -> bytes:
        return _paused(self._render, registry)

    def render_openmetrics(self, registry: Collector) -> bytes:
        return _paused(self._render_openmetrics, registry)

    def _render(self, registry: Collector) -> bytes:
        lines = _Round(_text_prefix, self._text)
        out: list[str] = []
        for metric in registry.collect():
            mtype = metric.type
            out.append(_help(metric.name + _NAME_SUFFIX.get(mtype, ""), metric.documentation,
                             _TYPES.get(mtype, mtype)))
            moved: dict[str, list[str]] = {}
            for s in metric.samples:
                if s.timestamp is None:
                    line = lines.line(s.name, s.labels, s.value)
                else:  # none of ours: written in full
                    stamp = int(float(s.timestamp) * 1000)
                    line = f"{_text_prefix(s.name, s.labels)}{_go_float(s.value)} {stamp:d}\n"
                suffix = s.name[len(metric.name):] if s.name.startswith(metric.name) else ""
                if suffix in _SUFFIXES:
                    moved.setdefault(suffix, []).append(line)
                else:
                    out.append(line)
            for suffix, moved_lines in sorted(moved.items()):
                out.append(_help(metric.name + suffix, metric.documentation, "gauge"))
                out.extend(moved_lines)
        self._text = lines.current
        return "".join(out).encode("utf-8")

    def _render_openmetrics(self, registry: Collector) -> bytes:
        families = list(registry.collect())
        if any(s.exemplar or s.native_histogram for m in families for s in m.samples):
            # Not written by this exporter's collectors: the library renders those.
            return cast(bytes, om.generate_latest(_Families(families)))  # type: ignore[no-untyped-call]
        lines = _Round(_openmetrics_prefix, self._openmetrics)
        out: list[str] = []
        for metric in families:
            name = escape_metric_name(metric.name, _U)
            out.append(f"# HELP {name} {_value(metric.documentation)}\n"
                       f"# TYPE {name} {metric.type}\n")
            if metric.unit:
                out.append(f"# UNIT {name} {metric.unit}\n")
            for s in metric.samples:
                if s.timestamp is None and s.value is not None:
                    out.append(lines.line(s.name, s.labels, s.value))
                else:  # none of ours: written in full
                    value = "" if s.value is None else _go_float(s.value)
                    stamp = "" if s.timestamp is None else f" {s.timestamp}"
                    out.append(f"{_openmetrics_prefix(s.name, s.labels)}{value}{stamp}\n")
        self._openmetrics = lines.current
        out.append("# EOF\n")
        return "".join(out).encode("utf-8")
