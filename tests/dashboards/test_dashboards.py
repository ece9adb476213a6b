"""The Grafana dashboards: importable unchanged (datasource variable, no fixed uid), the
variables and units the issue asks for, every metric from the catalogue. The e2e test
(tests/e2e) evaluates every panel query against real Prometheus and VictoriaMetrics."""

from __future__ import annotations

import importlib.util
import re
from typing import Any

import pytest

from gpu_exporter.model import catalogue as c
from gpu_exporter.model.catalogue import BY_NAME, Kind
from tests.dashboards.panels import (
    DASHBOARD_DIR,
    DASHBOARD_FILES,
    load,
    panels,
    queries,
    substitute,
)
from tests.rules.promql import family_names, metric_names, strip_histogram_suffix
from tests.rules.rulefiles import recorded_names

SCRAPE_SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
IDS = [p.stem for p in DASHBOARD_FILES]


def test_the_four_dashboards_exist() -> None:
    assert {p.name for p in DASHBOARD_FILES} == {
        "fleet-overview.json", "cost-energy.json", "cuda-kernels.json",
        "exporter-health.json"}


def test_json_is_what_the_generator_writes() -> None:
    spec = importlib.util.spec_from_file_location("generate", DASHBOARD_DIR / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, text in module.render().items():
        assert (DASHBOARD_DIR / name).read_text() == text, (
            f"dashboards/{name} is stale: run `python dashboards/generate.py`")


def _uids(node: Any, path: str = "") -> list[tuple[str, Any]]:
    out = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "uid" and path:
                out.append((path, v))
            out.extend(_uids(v, f"{path}/{k}"))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(_uids(v, f"{path}/{i}"))
    return out


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=IDS)
def test_datasource_is_a_variable_never_a_fixed_uid(path: Any) -> None:
    doc = load(path)
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    nested = _uids(doc)
    assert nested, "no datasource references at all"
    assert all(uid == "${datasource}" for _, uid in nested), nested
    for p in panels(doc):
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=IDS)
def test_host_team_gpu_variables_and_a_unit_on_every_panel(path: Any) -> None:
    doc = load(path)
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    for name in ("host", "team", "gpu"):
        assert variables[name]["type"] == "query", name
        assert variables[name]["includeAll"] and variables[name]["allValue"] == ".*"
    for p in panels(doc):
        assert p["fieldConfig"]["defaults"].get("unit"), f"{p['title']}: no unit"
        assert p["targets"], f"{p['title']}: no query"


def test_every_panel_uses_the_variables_it_should() -> None:
    """Device panels filter on host/team/GPU, so the variables do something; the node's
    own hw_ families (hw_power_watts: a socket, not a GPU) on host."""
    node = {f.name for f in c.CATALOGUE if f.scope is c.Scope.HOST}
    for q in queries():
        names = family_names([q.expr], set())
        if any(n.startswith("hw_") for n in names):
            assert "$host" in q.expr, q.id
        if any(n.startswith("hw_") and n not in node for n in names):
            assert "$gpu" in q.expr, q.id


def test_substitution_leaves_no_variable() -> None:
    for q in queries():
        assert "$" not in substitute(q.expr), q.id


def _metrics_of(dashboard: str) -> set[str]:
    return family_names([q.expr for q in queries() if q.dashboard == dashboard],
                        recorded_names())


def test_each_dashboard_covers_what_the_issue_asks() -> None:
    assert {"hw_gpu_utilization_ratio", "hw_gpu_memory_usage_bytes", "hw_gpu_power_draw_watts",
            "hw_gpu_temperature_celsius", "hw_gpu_clock_hertz", "hw_errors_total",
            "hw_gpu_up"} <= _metrics_of("fleet-overview")
    cost_exprs = " ".join(q.expr for q in queries() if q.dashboard == "cost-energy")
    for needed in ("team:gpu_idle_cost_dollars_per_hour", "team:hw_gpu_energy_kwh:increase1h",
                   "team:hw_gpu_energy_cost_dollars:increase1h", "/ 3.6e6"):
        assert needed in cost_exprs, needed
    assert {"gpu_kernel_launch_calls_total", "gpu_memory_copies_bytes_sum",
            "gpu_memory_copies_bytes_bucket", "gpu_memory_allocations_bytes_bucket",
            "gpu_sync_duration_seconds_sum", "gpu_kernel_duration_seconds_bucket"
            } <= _metrics_of("cuda-kernels")
    assert {"gpu_exporter_collector_success", "gpu_exporter_collector_duration_seconds",
            "gpu_exporter_ebpf_events_dropped_total", "gpu_exporter_ebpf_attached_libraries",
            "gpu_exporter_feature_status"} <= _metrics_of("exporter-health")


def test_every_metric_a_dashboard_reads_is_in_the_catalogue() -> None:
    histograms = {m.name for m in BY_NAME.values() if m.kind is Kind.HISTOGRAM}
    recorded = recorded_names()
    used = family_names([q.expr for q in queries()], recorded) - SCRAPE_SYNTHETIC
    assert len(used) > 20
    missing = {n for n in used if strip_histogram_suffix(n, histograms) not in BY_NAME}
    assert not missing, f"dashboards read metrics the exporter does not have: {sorted(missing)}"
    # and every recording rule a dashboard reads exists in alerts/
    read = {n for q in queries() for n in _names_with_colon(q.expr)}
    assert read <= recorded, read - recorded


def _names_with_colon(expr: str) -> set[str]:
    return {n for n in metric_names(expr) if ":" in n}


def test_no_panel_names_a_scrape_job() -> None:
    """A ServiceMonitor's job is its Service's name, a scrape config's whatever its author
    chose: the scrape's own series are filtered on the $job variable, never on a name."""
    scrape_queries = 0
    for q in queries():
        assert not re.search(r"\bjob\s*(=|!=|=~|!~)\s*\"(?!\$job\")", q.expr), q.id
        if metric_names(q.expr) & SCRAPE_SYNTHETIC:
            scrape_queries += 1
            assert 'job=~"$job"' in q.expr, q.id
    assert scrape_queries >= 2


def test_the_job_variable_offers_the_jobs_of_gpu_exporters_only() -> None:
    """"All" must not widen `up{job=~"$job"}` to every target of every job: no custom
    all value (Grafana then joins the jobs found), and those are the jobs of series only a
    gpu-exporter has."""
    for path in DASHBOARD_FILES:
        job = {v["name"]: v for v in load(path)["templating"]["list"]}.get("job")
        if job is None:
            continue
        assert job["type"] == "query" and job["includeAll"] and "allValue" not in job
        m = re.fullmatch(r"label_values\((\w+)(\{.*\})?,\s*job\)", job["definition"])
        assert m and m.group(1) in BY_NAME, job["definition"]


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=IDS)
def test_every_variable_a_query_uses_is_on_its_dashboard(path: Any) -> None:
    doc = load(path)
    defined = {v["name"] for v in doc["templating"]["list"]}
    for p in panels(doc):
        for t in p["targets"]:
            used = {a or b for a, b in re.findall(r"\$\{(\w+)\}|\$(\w+)", t["expr"])}
            assert {u for u in used if not u.startswith("__")} <= defined, (p["title"], used)


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=IDS)
def test_panels_show_what_grafana_shows_by_default(path: Any) -> None:
    """The builders' own defaults would hide legends, sort tooltips and leave stats without
    a reduction; the panels keep Grafana's: legend shown, tooltip unsorted, last value."""
    for p in panels(doc := load(path)):
        options = p["options"]
        if p["type"] in ("timeseries", "bargauge"):
            assert options["legend"]["showLegend"] is True, p["title"]
        if p["type"] == "timeseries":
            assert options["tooltip"] == {"mode": "multi", "sort": "none"}, p["title"]
        if p["type"] in ("stat", "bargauge"):
            assert options["reduceOptions"]["calcs"] == ["lastNotNull"], p["title"]
    assert doc["graphTooltip"] == 1


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=IDS)
def test_panels_tile_the_grid_without_overlap(path: Any) -> None:
    doc = load(path)
    taken: set[tuple[int, int]] = set()
    ids = []
    for p in doc["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["w"] > 0 and g["h"] > 0, p["title"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                 for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & taken, f"{p['title']} overlaps another panel"
        taken |= cells
        ids.append(p["id"])
    assert len(set(ids)) == len(ids)
