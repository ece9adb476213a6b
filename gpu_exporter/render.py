"""The text exposition (format 0.0.4) of a registry, byte for byte what
prometheus_client's `generate_latest` writes, but reusing each series' line prefix
(name and label text) from the previous render: at one scrape a second most label sets
do not change, and escaping and joining them was most of the rendering's time.

Only the default negotiation comes here (plain text 0.0.4, no `name[]`); every other
variant is prometheus_client's own (gpu_exporter/web.py). Equality with
`generate_latest` is tested on the goldens and on randomised families
(tests/core/test_render.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

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
        return f"{escape_metric_name(name, _U)} "
    text = ",".join(f'{escape_label_name(k, _U)}="{_value(v)}"' for k, v in sorted(labels.items()))
    return f"{escape_metric_name(name, _U)}{{{text}}} "


def _help(name: str, documentation: str, mtype: str) -> str:
    doc = documentation.replace("\\", r"\\").replace("\n", r"\n")
    name = escape_metric_name(name, _U)
    return f"# HELP {name} {doc}\n# TYPE {name} {mtype}\n"


class TextRenderer:
    """`render(registry)` equals `generate_latest(registry)`. Safe to call from several
    threads: each render reads the previous prefixes and publishes its own when done."""

    def __init__(self) -> None:
        self._prefixes: dict[_Key, tuple[_Key, str]] = {}

    def render(self, registry: Collector) -> bytes:
        previous, prefixes = self._prefixes, dict[_Key, tuple[_Key, str]]()
        out: list[str] = []
        for metric in registry.collect():
            mtype = metric.type
            out.append(_help(metric.name + _NAME_SUFFIX.get(mtype, ""), metric.documentation,
                             _TYPES.get(mtype, mtype)))
            moved: dict[str, list[str]] = {}
            for s in metric.samples:
                key = (s.name, *s.labels, *s.labels.values())
                entry = previous.get(key) or prefixes.get(key)
                if entry is None:
                    entry = key, _prefix(s.name, s.labels)
                # The entry's own key object is kept, not this scrape's equal one: what
                # the cache holds then dates from the scrape that first saw the series,
                # instead of pinning the memory of every scrape (a high-water after a
                # burst of concurrent scrapes).
                prefixes[entry[0]] = entry
                prefix = entry[1]
                stamp = "" if s.timestamp is None else f" {int(float(s.timestamp) * 1000):d}"
                line = f"{prefix}{_go_float(s.value)}{stamp}\n"
                suffix = s.name[len(metric.name):] if s.name.startswith(metric.name) else ""
                if suffix in _SUFFIXES:
                    moved.setdefault(suffix, []).append(line)
                else:
                    out.append(line)
            for suffix, lines in sorted(moved.items()):
                out.append(_help(metric.name + suffix, metric.documentation, "gauge"))
                out.extend(lines)
        self._prefixes = prefixes
        return "".join(out).encode("utf-8")
