"""Writes the Grafana dashboards of this folder: `python dashboards/generate.py`.

The JSON files are what users import (Grafana UI "Import", or file provisioning); this
script is how we keep four dashboards consistent (datasource variable, host/team/GPU
variables, a unit on every panel). A test fails when the JSON files are stale.

Panels use the `datasource` template variable (type prometheus), never a fixed uid, so the
same file imports into any Grafana and works with Prometheus or VictoriaMetrics.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DS = {"type": "prometheus", "uid": "${datasource}"}
# Every device query filters on these; "All" is ".*", which also matches series without the
# label (a host whose exporter sets no team).
SEL = 'host_name=~"$host", team=~"$team", hw_id=~"$gpu"'
HOST_TEAM = 'host_name=~"$host", team=~"$team"'
RI = "$__rate_interval"


def variables() -> list[dict[str, Any]]:
    def query_var(name: str, label: str, query: str) -> dict[str, Any]:
        return {
            "name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": f"var-{name}"},
            "definition": query, "refresh": 2, "multi": True, "includeAll": True,
            "allValue": ".*", "current": {"selected": True, "text": ["All"],
                                          "value": ["$__all"]},
            "sort": 1,
        }

    out: list[dict[str, Any]] = [{
        "name": "datasource", "label": "Data source", "type": "datasource",
        "query": "prometheus", "current": {}, "hide": 0, "refresh": 1,
    }]
    out.append(query_var("host", "Host", "label_values(gpu_exporter_build_info, host_name)"))
    out.append(query_var("team", "Team",
                         'label_values(gpu_exporter_build_info{host_name=~"$host"}, team)'))
    out.append(query_var(
        "gpu", "GPU", 'label_values(hw_gpu_info{host_name=~"$host", team=~"$team"}, hw_id)'))
    return out


class Board:
    def __init__(self, uid: str, title: str, description: str, tags: list[str]) -> None:
        self.uid = uid
        self.title = title
        self.description = description
        self.tags = tags
        self.panels: list[dict[str, Any]] = []
        self.x = 0
        self.y = 0

    def row(self, title: str) -> None:
        if self.x:
            self.x, self.y = 0, self.y + 8
        self.panels.append({"type": "row", "title": title, "collapsed": False,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
                            "id": len(self.panels) + 1, "panels": []})
        self.y += 1

    def panel(self, title: str, kind: str, unit: str, targets: list[tuple[str, str]],
              width: int = 12, height: int = 8, description: str = "",
              instant: bool = False, fmt: str = "time_series",
              extra: dict[str, Any] | None = None) -> None:
        if self.x + width > 24:
            self.x, self.y = 0, self.y + height
        panel: dict[str, Any] = {
            "id": len(self.panels) + 1, "type": kind, "title": title,
            "description": description, "datasource": DS,
            "gridPos": {"h": height, "w": width, "x": self.x, "y": self.y},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {},
            "targets": [
                {"datasource": DS, "refId": chr(ord("A") + i), "expr": expr,
                 "legendFormat": legend, "instant": instant, "range": not instant,
                 "format": fmt}
                for i, (expr, legend) in enumerate(targets)
            ],
        }
        if kind == "timeseries":
            panel["options"] = {"legend": {"displayMode": "list", "placement": "bottom"},
                                "tooltip": {"mode": "multi"}}
        if kind == "table":
            panel["transformations"] = [{"id": "labelsToFields", "options": {}}]
        if extra:
            panel.update(extra)
        self.panels.append(panel)
        self.x += width
        if self.x >= 24:
            self.x, self.y = 0, self.y + height

    def to_json(self) -> dict[str, Any]:
        return {
            "uid": self.uid, "title": self.title, "description": self.description,
            "tags": ["gpu", "gpu-exporter", *self.tags], "timezone": "browser",
            "editable": True, "graphTooltip": 1, "schemaVersion": 39, "version": 1,
            "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
            "templating": {"list": variables()},
            "annotations": {"list": []}, "links": [], "panels": self.panels,
        }


def fleet() -> Board:
    b = Board("gpu-fleet-overview", "GPU fleet overview",
              "Utilization, memory, power, temperature, clocks, errors and health of every "
              "GPU, by host, team and GPU.", ["fleet"])
    b.row("Fleet")
    b.panel("GPUs answering", "stat", "none", [(f"sum(hw_gpu_up{{{SEL}}})", "up")], 6, 4)
    b.panel("GPUs not answering", "stat", "none",
            [(f"count(hw_gpu_up{{{SEL}}} == 0) or vector(0)", "down")], 6, 4)
    b.panel("Mean utilization", "stat", "percentunit",
            [(f'avg(hw_gpu_utilization_ratio{{hw_gpu_task="general", {SEL}}})', "")], 6, 4)
    b.panel("Power drawn", "stat", "watt", [(f"sum(hw_gpu_power_draw_watts{{{SEL}}})", "")],
            6, 4)
    b.panel("Health state", "table", "none",
            [(f"hw_status{{{SEL}}} == 1", "")], 24, 6, instant=True, fmt="table",
            description="The one hw_state that is 1 for each GPU (ok, degraded, failed).")
    b.panel("Inventory", "table", "none", [(f"hw_gpu_info{{{SEL}}}", "")], 24, 6,
            instant=True, fmt="table")
    b.row("Utilization")
    b.panel("Utilization per GPU", "timeseries", "percentunit",
            [(f'hw_gpu_utilization_ratio{{hw_gpu_task="general", {SEL}}}',
              "{{host_name}} GPU {{gpu_index}}")],
            description="General (compute/graphics) engine busy fraction.")
    b.panel("Utilization by team (5 min average)", "timeseries", "percentunit",
            [('team:hw_gpu_utilization_ratio:avg5m{team=~"$team"}', "{{team}}")])
    b.panel("Utilization by host (5 min average)", "timeseries", "percentunit",
            [('host_name:hw_gpu_utilization_ratio:avg5m{host_name=~"$host"}', "{{host_name}}")])
    b.panel("Encoder and decoder utilization", "timeseries", "percentunit",
            [(f'hw_gpu_utilization_ratio{{hw_gpu_task=~"encoder|decoder", {SEL}}}',
              "{{host_name}} GPU {{gpu_index}} {{hw_gpu_task}}")])
    b.panel("Memory controller utilization", "timeseries", "percentunit",
            [(f"hw_gpu_memory_controller_utilization_ratio{{{SEL}}}",
              "{{host_name}} GPU {{gpu_index}}")])
    b.row("Memory")
    b.panel("Memory used", "timeseries", "bytes",
            [(f"hw_gpu_memory_usage_bytes{{{SEL}}}", "{{host_name}} GPU {{gpu_index}}")])
    b.panel("Memory used / size", "timeseries", "percentunit",
            [(f"hw_gpu_memory_usage_bytes{{{SEL}}} / hw_gpu_memory_limit_bytes{{{SEL}}}",
              "{{host_name}} GPU {{gpu_index}}")])
    b.panel("Memory per process", "timeseries", "bytes",
            [(f"process_gpu_memory_usage_bytes{{{SEL}}}",
              "{{host_name}} GPU {{gpu_index}} {{process_executable_name}} {{process_pid}}")])
    b.row("Power, temperature, clocks")
    b.panel("Power draw and limit", "timeseries", "watt",
            [(f"hw_gpu_power_draw_watts{{{SEL}}}", "{{host_name}} GPU {{gpu_index}} draw"),
             (f"hw_gpu_power_limit_watts{{{SEL}}}", "{{host_name}} GPU {{gpu_index}} limit")])
    b.panel("Temperature", "timeseries", "celsius",
            [(f"hw_gpu_temperature_celsius{{{SEL}}}",
              "{{host_name}} GPU {{gpu_index}} {{sensor}}")])
    b.panel("Clocks", "timeseries", "hertz",
            [(f"hw_gpu_clock_hertz{{{SEL}}}",
              "{{host_name}} GPU {{gpu_index}} {{hw_gpu_clock_domain}}")])
    b.panel("Fan speed", "timeseries", "percentunit",
            [(f"hw_gpu_fan_speed_ratio{{{SEL}}}", "{{host_name}} GPU {{gpu_index}} fan {{fan}}")])
    b.panel("Clock throttle reasons active", "timeseries", "none",
            [(f"hw_gpu_clock_throttle_active{{{SEL}}}",
              "{{host_name}} GPU {{gpu_index}} {{reason}}")],
            description="1 while the reason limits the clocks; sw_power_cap under load is "
            "normal, hw_thermal/sw_thermal/hw_power_brake are not.")
    b.panel("PCIe traffic", "timeseries", "Bps",
            [(f"rate(hw_gpu_io_bytes_total{{{SEL}}}[{RI}])",
              "{{host_name}} GPU {{gpu_index}} {{network_io_direction}}")])
    b.row("Errors")
    b.panel("Hardware errors", "timeseries", "short",
            [(f"sum by (host_name, gpu_index, error_type) "
              f"(increase(hw_errors_total{{{SEL}}}[{RI}]))",
              "{{host_name}} GPU {{gpu_index}} {{error_type}}")],
            description="New errors per interval; uncorrected ECC means: take the card out.")
    b.panel("Errors since reset", "table", "short",
            [(f"hw_errors_total{{{SEL}}}", "")], instant=True, fmt="table")
    b.panel("XID events", "timeseries", "short",
            [(f"sum by (host_name, gpu_index, xid) "
              f"(increase(hw_gpu_xid_errors_total{{{SEL}}}[{RI}]))",
              "{{host_name}} GPU {{gpu_index}} XID {{xid}}")])
    b.panel("GPU answering", "timeseries", "none",
            [(f"hw_gpu_up{{{SEL}}}", "{{host_name}} GPU {{gpu_index}}")])
    return b


def cost() -> Board:
    b = Board("gpu-cost-energy", "GPU cost & energy",
              "Idle spend, energy and energy cost, by team, host and GPU. Prices come from "
              "alerts/gpu-prices.rules.yml (recording rules).", ["cost"])
    g = f"gpu:gpu_idle_cost_dollars_per_hour{{{SEL}}}"
    b.row("Idle spend")
    b.panel("Idle spend now", "stat", "currencyUSD", [(f"sum({g})", "")], 8, 4,
            description="Dollars per hour paid for the idle share of the selected GPUs.")
    b.panel("Energy, selected range", "stat", "kwatth",
            [(f"sum(increase(hw_gpu_energy_consumed_joules_total{{{SEL}}}[$__range])) / 3.6e6",
              "")], 8, 4)
    b.panel("Energy cost, selected range", "stat", "currencyUSD",
            [(f"sum(increase(hw_gpu_energy_consumed_joules_total{{{SEL}}}[$__range])) / 3.6e6 "
              "* scalar(energy:price_dollars_per_kwh)", "")], 8, 4)
    b.panel("Idle spend by team", "timeseries", "currencyUSD",
            [('team:gpu_idle_cost_dollars_per_hour{team=~"$team"}', "{{team}}")],
            description="Dollars per hour: (1 - utilization) x price per GPU-hour.")
    b.panel("Idle spend per GPU", "timeseries", "currencyUSD",
            [(g, "{{host_name}} GPU {{gpu_index}} {{hw_name}}")])
    b.panel("Idle spend by host", "bargauge", "currencyUSD",
            [('host_name:gpu_idle_cost_dollars_per_hour{host_name=~"$host"}', "{{host_name}}")],
            instant=True)
    b.panel("Price per GPU-hour by model", "table", "currencyUSD",
            [("gpu:price_dollars_per_gpu_hour", "")], instant=True, fmt="table",
            description="Edit in alerts/gpu-prices.rules.yml.")
    b.row("Energy")
    b.panel("Energy per hour by team", "timeseries", "kwatth",
            [('team:hw_gpu_energy_kwh:increase1h{team=~"$team"}', "{{team}}")])
    b.panel("Energy per hour by host", "timeseries", "kwatth",
            [('host_name:hw_gpu_energy_kwh:increase1h{host_name=~"$host"}', "{{host_name}}")])
    b.panel("Energy by host, selected range", "bargauge", "kwatth",
            [(f"sum by (host_name) (increase(hw_gpu_energy_consumed_joules_total{{{SEL}}}"
              f"[$__range])) / 3.6e6", "{{host_name}}")], instant=True)
    b.panel("Power by team", "timeseries", "watt",
            [(f"sum by (team) (hw_gpu_power_draw_watts{{{SEL}}})", "{{team}}")])
    b.row("Energy cost")
    b.panel("Energy cost per hour by team", "timeseries", "currencyUSD",
            [('team:hw_gpu_energy_cost_dollars:increase1h{team=~"$team"}', "{{team}}")])
    b.panel("Energy cost per hour by host", "timeseries", "currencyUSD",
            [('host_name:hw_gpu_energy_cost_dollars:increase1h{host_name=~"$host"}',
              "{{host_name}}")])
    return b


def cuda() -> Board:
    b = Board("gpu-cuda-kernels", "CUDA kernels",
              "CUDA activity seen by the exporter's eBPF probes: launches, copies, "
              "allocations, synchronisation.", ["cuda", "ebpf"])
    s = HOST_TEAM
    b.row("Launches")
    b.panel("Top kernels by launch rate", "timeseries", "ops",
            [(f"topk(10, sum by (cuda_kernel_name) "
              f"(rate(gpu_kernel_launch_calls_total{{{s}}}[{RI}])))", "{{cuda_kernel_name}}")])
    b.panel("Launch rate by program and API", "timeseries", "ops",
            [(f"sum by (host_name, process_executable_name, cuda_api) "
              f"(rate(gpu_kernel_launch_calls_total{{{s}}}[{RI}]))",
              "{{host_name}} {{process_executable_name}} {{cuda_api}}")])
    b.panel("Grid size (median, p99)", "timeseries", "short",
            [(f"histogram_quantile(0.5, sum by (le, process_executable_name) "
              f"(rate(gpu_kernel_grid_size_bucket{{{s}}}[{RI}])))",
              "{{process_executable_name}} p50"),
             (f"histogram_quantile(0.99, sum by (le, process_executable_name) "
              f"(rate(gpu_kernel_grid_size_bucket{{{s}}}[{RI}])))",
              "{{process_executable_name}} p99")], description="Blocks per grid.")
    b.panel("Block size (median)", "timeseries", "short",
            [(f"histogram_quantile(0.5, sum by (le, process_executable_name) "
              f"(rate(gpu_kernel_block_size_bucket{{{s}}}[{RI}])))",
              "{{process_executable_name}}")], description="Threads per block.")
    b.panel("Kernel duration model (p90)", "timeseries", "s",
            [(f"histogram_quantile(0.9, sum by (le, cuda_kernel_name) "
              f"(rate(gpu_kernel_duration_seconds_bucket{{{s}}}[{RI}])))",
              "{{cuda_kernel_name}}")],
            description="Launch to the synchronising call that covered it: an upper bound "
            "model, not device execution time.")
    b.row("Memory copies and allocations")
    b.panel("Copy throughput by direction", "timeseries", "Bps",
            [(f"sum by (cuda_memcpy_kind) (rate(gpu_memory_copies_bytes_sum{{{s}}}[{RI}]))",
              "{{cuda_memcpy_kind}}")])
    b.panel("Copy size distribution", "heatmap", "bytes",
            [(f"sum by (le) (increase(gpu_memory_copies_bytes_bucket{{{s}}}[{RI}]))",
              "{{le}}")], fmt="heatmap",
            extra={"options": {"calculate": False, "yAxis": {"unit": "bytes"},
                               "cellValues": {"unit": "short"}}})
    b.panel("Copies per second by direction", "timeseries", "ops",
            [(f"sum by (cuda_memcpy_kind) (rate(gpu_memory_copies_bytes_count{{{s}}}[{RI}]))",
              "{{cuda_memcpy_kind}}")])
    b.panel("Allocation size (median, p99)", "timeseries", "bytes",
            [(f"histogram_quantile(0.5, sum by (le, process_executable_name) "
              f"(rate(gpu_memory_allocations_bytes_bucket{{{s}}}[{RI}])))",
              "{{process_executable_name}} p50"),
             (f"histogram_quantile(0.99, sum by (le, process_executable_name) "
              f"(rate(gpu_memory_allocations_bytes_bucket{{{s}}}[{RI}])))",
              "{{process_executable_name}} p99")])
    b.panel("Bytes allocated per second", "timeseries", "Bps",
            [(f"sum by (process_executable_name, cuda_api) "
              f"(rate(gpu_memory_allocations_bytes_sum{{{s}}}[{RI}]))",
              "{{process_executable_name}} {{cuda_api}}")])
    b.row("Synchronisation")
    b.panel("Time blocked in synchronising calls", "timeseries", "s",
            [(f"sum by (cuda_sync_call) (rate(gpu_sync_duration_seconds_sum{{{s}}}[{RI}]))",
              "{{cuda_sync_call}}")],
            description="Seconds blocked per second, summed over threads.")
    b.panel("Sync call duration (p99)", "timeseries", "s",
            [(f"histogram_quantile(0.99, sum by (le, cuda_sync_call) "
              f"(rate(gpu_sync_duration_seconds_bucket{{{s}}}[{RI}])))", "{{cuda_sync_call}}")])
    return b


def health() -> Board:
    b = Board("gpu-exporter-health", "GPU exporter health",
              "Is the exporter itself healthy: scrapes, collectors, features, eBPF.",
              ["exporter"])
    h = 'host_name=~"$host", team=~"$team"'
    b.row("Scrapes and collectors")
    b.panel("Exporter targets up", "timeseries", "none",
            [('up{job="gpu-exporter"}', "{{instance}}")],
            description='Scrape job must be named "gpu-exporter" (as in the alert pack).')
    b.panel("Scrape duration", "timeseries", "s",
            [('scrape_duration_seconds{job="gpu-exporter"}', "{{instance}}")])
    b.panel("Collector success", "timeseries", "none",
            [(f"gpu_exporter_collector_success{{{h}}}", "{{host_name}} {{collector}}")])
    b.panel("Collector duration", "timeseries", "s",
            [(f"gpu_exporter_collector_duration_seconds{{{h}}}", "{{host_name}} {{collector}}")])
    b.panel("Feature status", "table", "none",
            [(f"gpu_exporter_feature_status{{{h}}} == 1", "")], 24, 8, instant=True,
            fmt="table", description="enabled / unavailable (with the reason in the log "
            "and `gpu-exporter doctor`) / disabled.")
    b.panel("Build", "table", "none", [(f"gpu_exporter_build_info{{{h}}}", "")], 24, 5,
            instant=True, fmt="table")
    b.row("eBPF")
    b.panel("Attached CUDA libraries", "timeseries", "short",
            [(f"gpu_exporter_ebpf_attached_libraries{{{h}}}", "{{host_name}} {{library}}")])
    b.panel("eBPF events dropped", "timeseries", "ops",
            [(f"sum by (host_name, reason) "
              f"(rate(gpu_exporter_ebpf_events_dropped_total{{{h}}}[{RI}]))",
              "{{host_name}} {{reason}}")])
    b.panel("Launches beyond the kernel-name cap", "timeseries", "ops",
            [(f"rate(gpu_exporter_ebpf_kernel_names_overflow_total{{{h}}}[{RI}])",
              "{{host_name}}")])
    return b


BOARDS = {"fleet-overview.json": fleet, "cost-energy.json": cost,
          "cuda-kernels.json": cuda, "exporter-health.json": health}


def render() -> dict[str, str]:
    return {name: json.dumps(make().to_json(), indent=2) + "\n" for name, make in BOARDS.items()}


if __name__ == "__main__":
    for name, text in render().items():
        (HERE / name).write_text(text)
        print(name, file=sys.stderr)
