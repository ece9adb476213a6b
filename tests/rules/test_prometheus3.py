"""What Prometheus 3's migration guide changes, checked on every shipped rule and dashboard
query (docs/alerts-dashboards.md, "Prometheus 3"). Prometheus 3 is not installable here:
these are static checks; the rules themselves run on promtool 2.42 and VictoriaMetrics,
whose range windows are left-open as Prometheus 3's are.

- UTF-8 names: every metric, label and recorded name is a legacy (pre-UTF-8) name, so no
  query needs the quoted `{"name"}` form and no scrape needs escaping;
- left-open range selectors: no sum_over_time/count_over_time over a recording rule's
  output spans a whole number of that rule's evaluation intervals (Prometheus 2 would count
  one sample more than 3 does);
- renamed functions and normalised `le`/`quantile` values: none used.
"""

from __future__ import annotations

import re

import yaml

from gpu_exporter.model.catalogue import BY_NAME
from tests.dashboards.panels import queries
from tests.rules.rulefiles import ALERTS_DIR

LEGACY_METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LEGACY_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
RULE_FILES = sorted(p for p in ALERTS_DIR.rglob("*.rules.yml"))
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _seconds(d: str) -> int:
    return sum(int(n) * _UNITS[u] for n, u in re.findall(r"(\d+)([smhd])", d))


def _groups() -> list[tuple[str, int, list[dict[str, str]]]]:
    out = []
    for path in RULE_FILES:
        for g in yaml.safe_load(path.read_text())["groups"]:
            out.append((g["name"], _seconds(g.get("interval", "1m")), g["rules"]))
    return out


def _exprs() -> list[str]:
    return ([str(r["expr"]) for _, _, rules in _groups() for r in rules]
            + [q.expr for q in queries()])


def test_every_name_is_a_legacy_name() -> None:
    for m in BY_NAME.values():
        assert LEGACY_METRIC.fullmatch(m.name), m.name
        for label in m.labels:
            assert LEGACY_LABEL.fullmatch(label), (m.name, label)
    for _, _, rules in _groups():
        for r in rules:
            if "record" in r:
                assert LEGACY_METRIC.fullmatch(r["record"]), r["record"]
            for label in (r.get("labels") or {}):
                assert LEGACY_LABEL.fullmatch(label), (r, label)
    quoted = [e for e in _exprs() if re.search(r'\{\s*"', e)]
    assert not quoted, quoted  # the Prometheus 3 {"utf-8 name"} form: not needed


def test_no_sum_or_count_over_a_whole_number_of_a_rules_intervals() -> None:
    interval = {r["record"]: iv for _, iv, rules in _groups() for r in rules if "record" in r}
    bad = []
    for expr in _exprs():
        for fn, name, window in re.findall(
                r"\b(sum_over_time|count_over_time)\s*\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)"
                r"(?:\{[^}]*\})?\[([0-9smhd]+)\]", expr):
            if name in interval and _seconds(window) % interval[name] == 0:
                bad.append(f"{fn}({name}[{window}])")
    assert not bad, bad


def test_no_function_or_matcher_that_prometheus_3_changed() -> None:
    for expr in _exprs():
        assert "holt_winters" not in expr, expr  # double_exponential_smoothing in 3.x
        # 3.x normalises le/quantile of classic histograms to floats ("1" -> "1.0")
        assert not re.search(r'\b(le|quantile)\s*[!=]~?\s*"', expr), expr
