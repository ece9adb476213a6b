"""What a PromQL/MetricsQL expression reads: the metric names, for the drift tests.

Not a parser: it removes what cannot be a metric name (strings, label matchers, range and
offset durations, `by (...)`-style label lists, function calls, keywords, numbers) and what
remains are metric names. The rule and dashboard tests also run every expression through
the real Prometheus and VictoriaMetrics, which catch what this misses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_GRAFANA_VAR = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_:]*\}?")
_CALL = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\s*\(")
_DURATION = re.compile(r"\b\d+(?:ms|s|m|h|d|w|y)\b")
_NUMBER = re.compile(r"(?<![A-Za-z_:])\d+(?:\.\d+)?(?:e[+-]?\d+)?\b", re.IGNORECASE)
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "offset", "bool", "by", "without", "on", "ignoring",
     "group_left", "group_right", "inf", "nan", "atan2", "keep_metric_names"}
)
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (histogram suffixes kept as written)."""
    text = _STRING.sub(" ", expr)
    text = _GRAFANA_VAR.sub(" ", text)
    text = _MATCHERS.sub(" ", text)
    text = _BRACKETS.sub(" ", text)
    text = _LABEL_LIST.sub(" ", text)
    text = _CALL.sub(" ", text)
    text = _DURATION.sub(" ", text)
    text = _NUMBER.sub(" ", text)
    names = set(_IDENT.findall(text))
    return {n for n in names if n.lower() not in _KEYWORDS}


def family_names(exprs: Iterable[str], recorded: set[str]) -> set[str]:
    """Catalogue family names used by the expressions: histogram suffixes stripped,
    recording-rule outputs (which come from the rule files, not the exporter) and the
    scrape-synthesised `up` left out."""
    out: set[str] = set()
    for expr in exprs:
        for name in metric_names(expr):
            if name in recorded or name == "up":
                continue
            out.add(name)
    return out


def strip_histogram_suffix(name: str, histograms: set[str]) -> str:
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in histograms:
            return name[: -len(suffix)]
    return name
