"""The text expositions of a registry, byte for byte what prometheus_client writes
(`generate_latest(registry, escaping)` for text 0.0.4 and 1.0.0,
`openmetrics.exposition.generate_latest(registry, escaping)` for OpenMetrics 1.0.0), but
reusing each series' line from the previous render: at one scrape a second most label
sets do not change, and escaping and joining them was most of the rendering's time; the
value is written again only when it changed (many do not: info and state series,
limits, idle counters), which is most of what is left.

Every name escaping prometheus_client knows is served (`underscores`, Prometheus 2's and
vmagent's; `allow-utf-8`, Prometheus 3's default; `dots`, `values`): a series' name and
label text are made once, by the library's own escaping functions, when the series is
first seen, and kept per format and escaping. What goes to prometheus_client instead is
decided in gpu_exporter/http/app.py (`name[]`, OpenMetrics other than 1.0.0) and here
(exemplars, native histograms). Equality with prometheus_client is tested on the goldens
and on randomised families (tests/core/test_render.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as om
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString
from prometheus_client.validation import _is_valid_legacy_metric_name

from gpu_exporter.scrape.gcpause import PAUSE
from gpu_exporter.scrape.records import ScrapeRecords
from gpu_exporter.scrape.records_render import Entry, RecordSource, RecordWriter, with_value

_go_float = cast(Callable[[float], str], floatToGoString)

UNDERSCORES, ALLOW_UTF8 = om.UNDERSCORES, om.ALLOWUTF8
ESCAPINGS = frozenset({om.UNDERSCORES, om.ALLOWUTF8, om.DOTS, om.VALUES})
_SUFFIXES = ("_created", "_gsum", "_gcount")  # moved to gauges of their own at the end
_TYPES = {"counter": "counter", "info": "gauge", "stateset": "gauge",
          "gaugehistogram": "histogram", "unknown": "untyped"}
_NAME_SUFFIX = {"counter": "_total", "info": "_info"}

# the name, the label names, the label values: one flat tuple (records_render.py's keys
# hold a device id after the name, so never equal one of these)
_Key = tuple[Any, ...]
_Entry = Entry
_Make = Callable[[str, dict[str, str]], str]


def _value(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def _labels(labels: dict[str, str], escaping: str) -> str:
    return ",".join(f'{om.escape_label_name(k, escaping)}="{_value(v)}"'
                    for k, v in sorted(labels.items()))


def _text_maker(escaping: str) -> _Make:
    """`name{k="v",...} ` as prometheus_client's text `generate_latest` writes a sample
    line up to its value: a name that is not a legacy one goes inside the braces, quoted,
    when the escaping allows UTF-8."""
    def make(name: str, labels: dict[str, str]) -> str:
        text = _labels(labels, escaping)
        escaped = om.escape_metric_name(name, escaping)
        if escaping != ALLOW_UTF8 or _is_valid_legacy_metric_name(name):
            return f"{escaped}{{{text}}} " if text else f"{escaped} "
        return f"{{{escaped},{text}}} " if text else f"{{{escaped}}} "
    return make


def _openmetrics_maker(escaping: str) -> _Make:
    """The same for OpenMetrics, whose sample names are escaped as label names are (a
    ':' becomes '_' under `underscores`; `values` prefixes every name with `U__`)."""
    def make(name: str, labels: dict[str, str]) -> str:
        text = _labels(labels, escaping)
        if escaping != ALLOW_UTF8 or _is_valid_legacy_metric_name(name):
            escaped = om._escape(name, escaping, om._is_legacy_labelname_rune)
            return f"{escaped}{{{text}}} " if text else f"{escaped} "
        quoted = om.escape_metric_name(name, escaping)
        return f"{{{quoted},{text}}} " if text else f"{{{quoted}}} "
    return make


def _help(name: str, documentation: str, mtype: str, escaping: str) -> str:
    doc = documentation.replace("\\", r"\\").replace("\n", r"\n")
    name = om.escape_metric_name(name, escaping)
    return f"# HELP {name} {doc}\n# TYPE {name} {mtype}\n"


def _text_header(metric: Metric, escaping: str) -> str:
    mtype = metric.type
    return _help(metric.name + _NAME_SUFFIX.get(mtype, ""), metric.documentation,
                 _TYPES.get(mtype, mtype), escaping)


def _openmetrics_header(metric: Metric, escaping: str) -> str:
    name = om.escape_metric_name(metric.name, escaping)
    unit = f"# UNIT {name} {metric.unit}\n" if metric.unit else ""
    return (f"# HELP {name} {_value(metric.documentation)}\n"
            f"# TYPE {name} {metric.type}\n{unit}")


def _parts(registry: Collector) -> list[Collector]:
    """The collectors of `registry` in its order (a collector that hands over records
    is rendered from them); a registry with target info, or anything else, whole."""
    # prometheus_client's own attributes, read as its `collect` reads them; a release
    # without them gets the registry collected whole (the library's families).
    collectors = getattr(registry, "_collector_to_names", None)
    if (isinstance(registry, CollectorRegistry) and isinstance(collectors, dict)
            and not getattr(registry, "_target_info", True)):
        with registry._lock:
            return list(collectors)
    return [registry]


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
        else:
            entry = with_value(entry, value)
        self.current[entry[0]] = entry
        return entry[3]


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def _paused(render: Callable[[Collector, str], bytes], registry: Collector,
            escaping: str) -> bytes:
    """`render(registry, escaping)` with cyclic collection held off until the families
    and this render's keys are freed (`gcpause`): its thousands of small tuples would
    otherwise set off young collections that walk the live families, several per
    render."""
    PAUSE.begin()
    try:
        return render(registry, escaping)
    finally:
        PAUSE.end()


class TextRenderer:
    """`render(registry, escaping)` equals prometheus_client's text
    `generate_latest(registry, escaping)` (0.0.4 and 1.0.0 write the same bytes);
    `render_openmetrics(registry, escaping)` its OpenMetrics 1.0.0 `generate_latest`.
    The lines of the last render are kept per format and escaping (at most eight
    tables: one per scraper kind that asks, each as large as one exposition)."""

    def __init__(self) -> None:
        self._lines: dict[tuple[str, str], dict[_Key, _Entry]] = {}
        self._makers: dict[tuple[str, str], _Make] = {}
        self._records = RecordWriter()

    def render(self, registry: Collector, escaping: str = UNDERSCORES) -> bytes:
        return _paused(self._render, registry, _known(escaping))

    def render_openmetrics(self, registry: Collector, escaping: str = UNDERSCORES) -> bytes:
        return _paused(self._render_openmetrics, registry, _known(escaping))

    def _round(self, kind: str, escaping: str) -> _Round:
        key = kind, escaping
        make = self._makers.get(key)
        if make is None:
            make = self._makers[key] = (_text_maker if kind == "text"
                                        else _openmetrics_maker)(escaping)
        return _Round(make, self._lines.get(key, {}))

    def _write(self, records: ScrapeRecords, lines: _Round, kind: str, escaping: str,
               out: list[str]) -> None:
        make = _text_header if kind == "text" else _openmetrics_header
        self._records.write(
            records, lines.previous, lines.current, lines.make, lines.line,
            lambda fam: self._records.header(fam, kind, escaping, make), out)

    def _render(self, registry: Collector, escaping: str) -> bytes:
        lines = self._round("text", escaping)
        out: list[str] = []
        for part in _parts(registry):
            if isinstance(part, RecordSource):
                self._write(part.collect_records(), lines, "text", escaping, out)
            else:
                for metric in part.collect():
                    self._metric(metric, lines, escaping, out)
        self._lines["text", escaping] = lines.current
        return "".join(out).encode("utf-8")

    @staticmethod
    def _metric(metric: Metric, lines: _Round, escaping: str, out: list[str]) -> None:
        out.append(_text_header(metric, escaping))
        moved: dict[str, list[str]] = {}
        for s in metric.samples:
            if s.timestamp is None:
                line = lines.line(s.name, s.labels, s.value)
            else:  # none of ours: written in full
                stamp = int(float(s.timestamp) * 1000)
                line = f"{lines.make(s.name, s.labels)}{_go_float(s.value)} {stamp:d}\n"
            suffix = s.name[len(metric.name):] if s.name.startswith(metric.name) else ""
            if suffix in _SUFFIXES:
                moved.setdefault(suffix, []).append(line)
            else:
                out.append(line)
        for suffix, moved_lines in sorted(moved.items()):
            out.append(_help(metric.name + suffix, metric.documentation, "gauge", escaping))
            out.extend(moved_lines)

    def _render_openmetrics(self, registry: Collector, escaping: str) -> bytes:
        parts: list[ScrapeRecords | list[Metric]] = [
            part.collect_records() if isinstance(part, RecordSource) else list(part.collect())
            for part in _parts(registry)]
        if any(s.exemplar or s.native_histogram for part in parts if isinstance(part, list)
               for m in part for s in m.samples):
            # Not written by this exporter's collectors: the library renders those.
            families = [m for part in parts for m in (
                part if isinstance(part, list) else part.families())]
            return cast(bytes, om.generate_latest(  # type: ignore[no-untyped-call]
                _Families(families), escaping=escaping))
        lines = self._round("openmetrics", escaping)
        out: list[str] = []
        for part in parts:
            if isinstance(part, ScrapeRecords):
                self._write(part, lines, "openmetrics", escaping, out)
                continue
            for metric in part:
                out.append(_openmetrics_header(metric, escaping))
                for s in metric.samples:
                    if s.timestamp is None and s.value is not None:
                        out.append(lines.line(s.name, s.labels, s.value))
                    else:  # none of ours: written in full
                        value = "" if s.value is None else _go_float(s.value)
                        stamp = "" if s.timestamp is None else f" {s.timestamp}"
                        out.append(f"{lines.make(s.name, s.labels)}{value}{stamp}\n")
        self._lines["openmetrics", escaping] = lines.current
        out.append("# EOF\n")
        return "".join(out).encode("utf-8")


def _known(escaping: str) -> str:
    if escaping not in ESCAPINGS:
        raise ValueError(f"unknown name escaping {escaping!r}")
    return escaping
