"""The text expositions of a registry, byte for byte what prometheus_client writes
(`generate_latest` for text 0.0.4, `openmetrics.exposition.generate_latest` for
OpenMetrics 1.0.0), but reusing each series' line prefix (name and label text) from the
previous render: at one scrape a second most label sets do not change, and escaping and
joining them was most of the rendering's time.

Only the default negotiation comes here (text 0.0.4, or the OpenMetrics 1.0.0 that
Prometheus asks for, with neither `escaping=` nor `name[]`); every other variant is
prometheus_client's own (gpu_exporter/web.py). Equality with prometheus_client is
tested on the goldens and on randomised families (tests/core/test_render.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import cast

from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as om
from prometheus_client.openmetrics.exposition import escape_label_name, escape_metric_name
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

_go_float = cast(Callable[[float], str], floatToGoString)

_U = "underscores"  # prometheus_client's default escaping for names
_SUFFIXES = ("_created", "_gsum", "_gcount")  # moved to gauges of their own at the end
_TYPES = {"counter": "counter", "info": "gauge", "stateset": "gauge",
          "gaugehistogram": "histogram", "unknown": "untyped"}
_NAME_SUFFIX = {"counter": "_total", "info": "_info"}

_Key = tuple[str, ...]  # the name, the label names, the label values: one flat tuple


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
    """One render's line prefixes: those of the previous render are reused, the new ones
    made. Renders on several threads at once each have their own round; the last to
    finish leaves its prefixes to the next."""

    def __init__(self, make: Callable[[str, dict[str, str]], str],
                 previous: dict[_Key, tuple[_Key, str]]) -> None:
        self.make, self.previous = make, previous
        self.current: dict[_Key, tuple[_Key, str]] = {}

    def prefix(self, name: str, labels: dict[str, str]) -> str:
        key = (name, *labels, *labels.values())
        entry = self.previous.get(key) or self.current.get(key)
        if entry is None:
            entry = key, self.make(name, labels)
        # The entry's own key object is kept, not this scrape's equal one: what the cache
        # holds then dates from the scrape that first saw the series, instead of pinning
        # the memory of every scrape (a high-water after a burst of concurrent scrapes).
        self.current[entry[0]] = entry
        return entry[1]


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


class TextRenderer:
    """`render(registry)` equals prometheus_client's `generate_latest(registry)`;
    `render_openmetrics(registry)` its OpenMetrics 1.0.0 `generate_latest(registry)`."""

    def __init__(self) -> None:
        self._text: dict[_Key, tuple[_Key, str]] = {}
        self._openmetrics: dict[_Key, tuple[_Key, str]] = {}

    def render(self, registry: Collector) -> bytes:
        lines = _Round(_text_prefix, self._text)
        out: list[str] = []
        for metric in registry.collect():
            mtype = metric.type
            out.append(_help(metric.name + _NAME_SUFFIX.get(mtype, ""), metric.documentation,
                             _TYPES.get(mtype, mtype)))
            moved: dict[str, list[str]] = {}
            for s in metric.samples:
                stamp = "" if s.timestamp is None else f" {int(float(s.timestamp) * 1000):d}"
                line = f"{lines.prefix(s.name, s.labels)}{_go_float(s.value)}{stamp}\n"
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

    def render_openmetrics(self, registry: Collector) -> bytes:
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
                value = "" if s.value is None else _go_float(s.value)
                stamp = "" if s.timestamp is None else f" {s.timestamp}"
                out.append(f"{lines.prefix(s.name, s.labels)}{value}{stamp}\n")
        self._openmetrics = lines.current
        out.append("# EOF\n")
        return "".join(out).encode("utf-8")
