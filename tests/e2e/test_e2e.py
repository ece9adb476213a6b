"""End to end: the exporter on a simulated node (fake NVML H100s under load, real AMD and
Intel sysfs captures, real uprobes on the fake CUDA libraries with a workload running over
and over), scraped by a real Prometheus and by a real vmagent writing to a real
VictoriaMetrics; the shipped rules loaded by Prometheus and by vmalert. Every dashboard
panel query, every rule expression and the public queries of the metric contract must parse
and return data on both servers.

Where an expression is a threshold the healthy node does not cross (an alert, or the public
"> 50000 launches/s" query: the fake workload launches about a thousand per second), the
whole expression must parse and what it compares must return data.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import pytest

from tests.dashboards.panels import DASHBOARD_FILES, load, queries, substitute
from tests.e2e import fleet as fleet_mod
from tests.e2e.conftest import JOB, Stack
from tests.helpers import eventually
from tests.rules.rulefiles import load_rules
from tests.servers import QueryServer

SERVERS = ("prometheus", "victoriametrics")

# The queries at the end of the metric contract (spec/metrics.md), verbatim.
PUBLIC_QUERIES = (
    "topk(10, sum by (cuda_kernel_name) (rate(gpu_kernel_launch_calls_total[5m])))",
    "sum by (cuda_memcpy_kind) (rate(gpu_memory_copies_bytes_sum[5m]))",
    "(1 - avg_over_time(hw_gpu_utilization_ratio[1h])) * 2.80",
    "sum by (team) ((1 - avg_over_time(hw_gpu_utilization_ratio[5m])) * 2.80)",
    "sum by (host_name) (increase(hw_gpu_energy_consumed_joules_total[24h])) / 3.6e6",
    'sum by (hw_id, hw_name) (increase(hw_errors_total{error_type="uncorrected"}[1h]))',
    "(hw_gpu_memory_usage_bytes / hw_gpu_memory_limit_bytes) > 0.95",
    "sum by (host_name) (rate(gpu_kernel_launch_calls_total[1m])) > 50000",
)

THRESHOLD_ONLY = {"sum by (host_name) (rate(gpu_kernel_launch_calls_total[1m])) > 50000"}


_COMPARISON = re.compile(r"^(?P<signal>.*?)\s*(==|!=|>=|<=|>|<)\s*[-+0-9.eE]+\s*$", re.S)


def signal(expr: str) -> str:
    """What an alert compares: its expression without the final threshold (and the series
    inside absent()), which must have data on a healthy node."""
    expr = expr.strip()
    m = re.fullmatch(r"absent\((?P<inner>.*)\)", expr, re.S)
    if m:
        return m.group("inner")
    m = _COMPARISON.match(expr)
    if m and " or " not in expr:
        return m.group("signal")
    return expr


def _check(server: QueryServer, expr: str) -> None:
    result = server.query(expr)  # raises on a parse error
    assert result, f"{server.name}: no data for {expr!r}"


PANEL_QUERIES = queries()
RULES = load_rules()


def _label_values(s: QueryServer, definition: str) -> list[str]:
    """Grafana's label_values(metric{...}, label): the series API."""
    m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", definition)
    assert m, definition
    doc = s.get_json(f"/api/v1/label/{m.group(2)}/values?match[]="
                     + _quote(substitute(m.group(1))))
    return list(doc["data"])


def _all_of(s: QueryServer, name: str) -> str:
    """What Grafana puts for "All" of a variable without a custom all value: the values its
    query finds on this server (so a panel on $job reads the job the server has, whatever its
    name)."""
    for path in DASHBOARD_FILES:
        for var in load(path)["templating"]["list"]:
            if var["name"] == name:
                assert "allValue" not in var, var
                values = _label_values(s, var["definition"])
                assert values, (s.name, name)
                return values[0] if len(values) == 1 else "(" + "|".join(values) + ")"
    raise AssertionError(f"no dashboard has ${name}")


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("q", PANEL_QUERIES, ids=[q.id for q in PANEL_QUERIES])
def test_dashboard_panel_query(stack: Stack, server: str, q: Any) -> None:
    s = stack.servers[server]
    values = {"job": _all_of(s, "job")} if "$job" in q.expr else {}
    _check(s, substitute(q.expr, values))


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("rule", RULES, ids=[r.record or r.alert or "?" for r in RULES])
def test_rule_expression(stack: Stack, server: str, rule: Any) -> None:
    s = stack.servers[server]
    if rule.record:
        _check(s, rule.expr)
        # and the server that evaluates the rules has written the recorded series
        _check(s, rule.record)
    else:
        s.query(rule.expr)  # parses as a whole
        _check(s, signal(rule.expr))


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("expr", PUBLIC_QUERIES)
def test_public_query_unchanged(stack: Stack, server: str, expr: str) -> None:
    s = stack.servers[server]
    if expr in THRESHOLD_ONLY:
        s.query(expr)
        _check(s, signal(expr))
    else:
        _check(s, expr)


@pytest.mark.parametrize("server", SERVERS)
def test_dashboard_variables_have_values(stack: Stack, server: str) -> None:
    """Grafana's label_values(metric{...}, label) is the series API: each variable of each
    dashboard must offer at least one value."""
    s = stack.servers[server]
    for path in DASHBOARD_FILES:
        for var in load(path)["templating"]["list"]:
            if var["type"] != "query":
                continue
            assert _label_values(s, var["definition"]), (
                f"{server}: {path.stem} ${var['name']} has no values")


def _quote(text: str) -> str:
    return quote(text, safe="")


def test_every_source_of_the_node_is_live(stack: Stack) -> None:
    """No panel is 'proven' by an absent source: every collector of the run succeeded,
    eBPF included, and CUDA launches, NVIDIA, AMD and Intel GPUs and Gaudis all reached both
    servers."""
    for name, s in stack.servers.items():
        ok = {r["metric"]["collector"] for r in s.query("gpu_exporter_collector_success == 1")}
        assert {"nvidia", "amd", "intel", "gaudi", "processes", "host", "ebpf"} <= ok, (
            name, ok)
        vendors = {r["metric"]["hw_vendor"] for r in s.query("hw_gpu_info")}
        assert vendors == {"nvidia", "amd", "intel", "habana"}, (name, vendors)
        assert s.query("sum(rate(gpu_kernel_launch_calls_total[1m])) > 0"), name


def test_values_are_right_on_both_servers(stack: Stack) -> None:
    """Not just 'some data': the cost chain gives the numbers the rule files promise."""
    for name, s in stack.servers.items():
        price = {r["metric"].get("hw_name"): float(r["value"][1])
                 for r in s.query("gpu:price_dollars_per_gpu_hour")}
        assert price["NVIDIA H100 80GB HBM3"] == 4.0, (name, price)
        models = {r["metric"]["hw_name"] for r in s.query("hw_gpu_info")}
        assert len(models) >= 4, models  # H100, the AMD and the Intel card, the Gaudi 2
        for model in models - {"NVIDIA H100 80GB HBM3"}:
            assert price[model] == 2.8, (name, model, price)  # the default
        idle = s.query('gpu:gpu_idle_cost_dollars_per_hour{gpu_index="1"}')
        assert len(idle) == 1, (name, idle)
        # GPU 1 runs at 3%: 0.97 x 4 $/h
        assert abs(float(idle[0]["value"][1]) - 0.97 * 4.0) < 0.05, (name, idle)
        kwh = s.query(f'sum(increase(hw_gpu_energy_consumed_joules_total{{job="{JOB}"}}[1m]))'
                      " / 3.6e6")
        assert 0 < float(kwh[0]["value"][1]) < 1, (name, kwh)


def test_alerts_fire_in_prometheus_and_through_vmalert(stack: Stack) -> None:
    """The alerts without `for:` that this node deserves fire on both paths, with their
    labels: uncorrected ECC on GPU 3 and XID 79 on GPU 0 (the Xid Catalog's RESTART_BM: the
    node must be rebooted, by whoever runs the infrastructure)."""
    want = {("GpuUncorrectedEccErrors", "3"), ("GpuNodeRebootRequired", "0")}
    prom_alerts = stack.prom.get_json("/api/v1/alerts")["data"]["alerts"]
    got = {(a["labels"]["alertname"], a["labels"].get("gpu_index")) for a in prom_alerts
           if a["state"] == "firing"}
    assert want <= got, prom_alerts
    for a in prom_alerts:
        assert a["labels"]["severity"] and a["labels"]["category"], a
    stack.alertmanager.wait_ready()
    am = _wait_am(stack, want)
    for a in am:
        if a["labels"]["alertname"] == "GpuNodeRebootRequired":
            assert a["labels"]["xid"] == "79" and a["labels"]["severity"] == "critical"
            assert a["labels"]["action"] == "restart_bm"
            assert a["labels"]["owner"] == "infrastructure"
            assert a["annotations"]["runbook_url"].endswith("/runbooks.md#gpunoderebootrequired")


def _wait_am(stack: Stack, want: set[tuple[str, str]]) -> list[dict[str, Any]]:
    def arrived() -> list[dict[str, Any]]:
        alerts = stack.alertmanager.get_json("/api/v2/alerts")
        got = {(a["labels"]["alertname"], a["labels"].get("gpu_index")) for a in alerts}
        assert want <= got, (alerts, stack.vmalert.logs()[-3000:])
        return list(alerts)

    return eventually(arrived, 60, "alerts in Alertmanager", interval=1)


def test_gpm_activity_tells_busy_from_working_on_both_servers(stack: Stack) -> None:
    """GPU 3 runs kernels 97 % of the time with 4 % of its SMs active: the condition of
    GpuBusyButSmIdle holds for it alone, and the fleet's SM activity by team is what the
    GPUs report."""
    busy = next(r.expr for r in RULES if r.alert == "GpuBusyButSmIdle")
    for name, s in stack.servers.items():
        assert {r["metric"]["gpu_index"] for r in s.query(busy)} == {"3"}, name
        sm = s.wait_for("team:hw_gpu_sm_active_ratio:avg5m", 90)
        assert len(sm) == 1 and 0 < float(sm[0]["value"][1]) < 1, (name, sm)
        per_gpu = {r["metric"]["gpu_index"]: float(r["value"][1])
                   for r in s.query('hw_gpu_sm_active_ratio{hw_vendor="nvidia"}')}
        assert per_gpu["3"] == 0.04 and per_gpu["4"] == 0.0, (name, per_gpu)


def test_the_gaudis_go_through_the_rules_like_any_gpu(stack: Stack) -> None:
    """The mixed node's Gaudis (hw_vendor="habana") in the families the rules and
    dashboards read: energy counters that move, the utilization average, the idle cost at
    the default price, and nothing of theirs under an Intel filter."""
    for name, s in stack.servers.items():
        energy = s.query(
            'rate(hw_gpu_energy_consumed_joules_total{hw_vendor="habana"}[1m]) > 0')
        assert {r["metric"]["gpu_pci_address"] for r in energy} == set(fleet_mod.GAUDIS), (
            name, energy)
        util = s.wait_for('gpu:hw_gpu_utilization_ratio:avg5m{hw_vendor="habana"}', 90)
        assert len(util) == 2 and all(0 < float(r["value"][1]) < 1 for r in util), (name, util)
        idle = s.wait_for('gpu:gpu_idle_cost_dollars_per_hour{hw_name="HL-225"}', 90)
        assert len(idle) == 2 and all(0 < float(r["value"][1]) < 2.8 for r in idle), (
            name, idle)
        intel = {r["metric"]["gpu_pci_address"] for r in s.query('hw_gpu_up{hw_vendor="intel"}')}
        assert not intel & set(fleet_mod.GAUDIS), (name, intel)
