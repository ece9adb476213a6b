"""Writes the Grafana dashboards of this folder: `python dashboards/generate.py`.

The JSON files are what users import (Grafana UI "Import", or file provisioning); this
script builds them with Grafana's typed builders (`grafana-foundation-sdk`, the release for
the current dashboard schema) so that the four dashboards stay consistent: the datasource
variable, the host/team/GPU variables, a unit on every panel, one layout. A test fails when
the JSON files are stale.

Panels use the `datasource` template variable (type prometheus), never a fixed uid, so the
same file imports into any Grafana and works with Prometheus or VictoriaMetrics.

To add a panel: pick the helper of its kind (`timeseries`, `stat`, `table`, `bargauge`,
`heatmap`), give it a title, a unit and its queries as (PromQL, legend) pairs, and
`board.add()` it under the right `board.row()`; chain any other SDK builder method on the
panel (`.min(0)`, `.thresholds(...)`) before adding it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Protocol, Self, TypeVar

from grafana_foundation_sdk.builders import bargauge as sdk_bargauge
from grafana_foundation_sdk.builders import common as sdk_common
from grafana_foundation_sdk.builders import dashboard as sdk_dashboard
from grafana_foundation_sdk.builders import heatmap as sdk_heatmap
from grafana_foundation_sdk.builders import prometheus as sdk_prometheus
from grafana_foundation_sdk.builders import stat as sdk_stat
from grafana_foundation_sdk.builders import table as sdk_table
from grafana_foundation_sdk.builders import timeseries as sdk_timeseries
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.variants import Dataquery
from grafana_foundation_sdk.models import common, dashboard
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

HERE = Path(__file__).resolve().parent
DS = common.DataSourceRef(type_val="prometheus", uid="${datasource}")
# Every device query filters on these; "All" is ".*", which also matches series without the
# label (a host whose exporter sets no team).
SEL = 'host_name=~"$host", team=~"$team", hw_id=~"$gpu"'
HOST_TEAM = 'host_name=~"$host", team=~"$team"'
# The scrape's own series (up, scrape_duration_seconds) exist for every target of every job:
# they are filtered on the jobs that scrape a gpu-exporter, whatever their name.
JOB = 'job=~"$job"'
RI = "$__rate_interval"
GRID_WIDTH = 24

Query = tuple[str, str]
"""A panel query: (PromQL expression, legend format)."""


# Variables ----------------------------------------------------------------------------------

def _datasource_variable() -> sdk_dashboard.DatasourceVariable:
    return (sdk_dashboard.DatasourceVariable("datasource").label("Data source")
            .type("prometheus").hide(dashboard.VariableHide.DONT_HIDE))


def _label_variable(name: str, label: str, query: str,
                    all_value: str | None = ".*") -> sdk_dashboard.QueryVariable:
    """A multi-select variable over the values of a label, "All" selected."""
    variable = (
        sdk_dashboard.QueryVariable(name).label(label).datasource(DS)
        .query({"query": query, "refId": f"var-{name}"}).definition(query)
        .refresh(dashboard.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dashboard.VariableSort.ALPHABETICAL_ASC)
        .multi(True).include_all(True)
        .current(dashboard.VariableOption(selected=True, text=["All"], value=["$__all"])))
    return variable.all_value(all_value) if all_value is not None else variable


def variables() -> list[sdk_dashboard.DatasourceVariable | sdk_dashboard.QueryVariable]:
    return [
        _datasource_variable(),
        _label_variable("host", "Host", "label_values(gpu_exporter_build_info, host_name)"),
        _label_variable("team", "Team",
                        'label_values(gpu_exporter_build_info{host_name=~"$host"}, team)'),
        _label_variable("gpu", "GPU",
                        'label_values(hw_gpu_info{host_name=~"$host", team=~"$team"}, hw_id)'),
    ]


def job_variable() -> sdk_dashboard.QueryVariable:
    """The scrape jobs of gpu-exporter targets (a ServiceMonitor's job is its Service's name).
    No custom "All" value: Grafana then joins the jobs found, so "All" never widens to every
    job's `up`."""
    return _label_variable("job", "Job", "label_values(gpu_exporter_build_info, job)",
                           all_value=None)


# Panels: one helper per kind ----------------------------------------------------------------

class PanelBuilder(Protocol):
    """What every panel builder of the SDK has (a new kind, a gauge or a pie chart, needs
    nothing more than its helper)."""

    def title(self, title: str) -> Self: ...
    def description(self, description: str) -> Self: ...
    def datasource(self, datasource: common.DataSourceRef) -> Self: ...
    def unit(self, unit: str) -> Self: ...
    def with_target(self, target: Builder[Dataquery]) -> Self: ...


Panel = TypeVar("Panel", bound=PanelBuilder)


def _panel(panel: Panel, title: str, unit: str, queries: tuple[Query, ...], description: str,
           *, instant: bool = False,
           fmt: PromQueryFormat = PromQueryFormat.TIME_SERIES) -> Panel:
    assert queries, f"{title}: a panel needs a query"
    panel.title(title).datasource(DS).unit(unit)
    if description:
        panel.description(description)
    for i, (expr, legend) in enumerate(queries):
        query = (sdk_prometheus.Dataquery().datasource(DS).ref_id(chr(ord("A") + i))
                 .expr(expr).legend_format(legend).format(fmt))
        panel.with_target(query.instant() if instant else query.range())
    return panel


def _legend() -> sdk_common.VizLegendOptions:
    """Grafana's default legend (the SDK's default hides it)."""
    return (sdk_common.VizLegendOptions().show_legend(True)
            .display_mode(common.LegendDisplayMode.LIST).placement(common.LegendPlacement.BOTTOM))


def timeseries(title: str, unit: str, *queries: Query,
               description: str = "") -> sdk_timeseries.Panel:
    return (_panel(sdk_timeseries.Panel(), title, unit, queries, description)
            .legend(_legend())
            .tooltip(sdk_common.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI)
                     .sort(common.SortOrder.NONE)))


def stat(title: str, unit: str, *queries: Query, description: str = "") -> sdk_stat.Panel:
    """The last value of the range."""
    return (_panel(sdk_stat.Panel(), title, unit, queries, description)
            .reduce_options(sdk_common.ReduceDataOptions().calcs(["lastNotNull"])))


def table(title: str, unit: str, *queries: Query, description: str = "") -> sdk_table.Panel:
    """One row per series at the end of the range, its labels as columns."""
    return (_panel(sdk_table.Panel(), title, unit, queries, description, instant=True,
                   fmt=PromQueryFormat.TABLE)
            .with_transformation(dashboard.DataTransformerConfig(id_val="labelsToFields",
                                                                 options={})))


def bargauge(title: str, unit: str, *queries: Query,
             description: str = "") -> sdk_bargauge.Panel:
    """One bar per series at the end of the range."""
    return (_panel(sdk_bargauge.Panel(), title, unit, queries, description, instant=True)
            .legend(_legend())
            .reduce_options(sdk_common.ReduceDataOptions().calcs(["lastNotNull"])))


def heatmap(title: str, unit: str, *queries: Query,
            description: str = "") -> sdk_heatmap.Panel:
    """Buckets as exported (`sum by (le)` of a histogram): unit of the bucket bounds; the
    cells count observations."""
    return (_panel(sdk_heatmap.Panel(), title, unit, queries, description,
                   fmt=PromQueryFormat.HEATMAP)
            .calculate(False)
            .y_axis(sdk_heatmap.YAxisConfig().unit(unit))
            .cell_values(sdk_heatmap.CellValues().unit("short")))


# Dashboards ---------------------------------------------------------------------------------

class Board:
    """A dashboard being built: rows, and panels laid out left to right on Grafana's
    24-column grid, wrapping to a new line when the next panel does not fit."""

    def __init__(self, uid: str, title: str, description: str, tags: list[str],
                 extra_variables: tuple[sdk_dashboard.QueryVariable, ...] = ()) -> None:
        self.dashboard = (
            sdk_dashboard.Dashboard(title).uid(uid).description(description)
            .tags(["gpu", "gpu-exporter", *tags]).timezone("browser").editable()
            .tooltip(dashboard.DashboardCursorSync.CROSSHAIR).version(1).refresh("30s")
            .time("now-6h", "now").variables([*variables(), *extra_variables])
            .annotations([]).links([]))
        self._ids = 0
        self._x = self._y = self._line_height = 0

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    def _new_line(self) -> None:
        self._x, self._y, self._line_height = 0, self._y + self._line_height, 0

    def row(self, title: str) -> None:
        if self._x:
            self._new_line()
        self.dashboard.with_row(
            sdk_dashboard.Row(title).id(self._next_id()).collapsed(False)
            .grid_pos(dashboard.GridPos(h=1, w=GRID_WIDTH, x=0, y=self._y)))
        self._y += 1

    def add(self, panel: Builder[dashboard.Panel], width: int = 12, height: int = 8) -> None:
        if self._x + width > GRID_WIDTH:
            self._new_line()
        built = panel.build()
        built.id_val = self._next_id()
        built.grid_pos = dashboard.GridPos(h=height, w=width, x=self._x, y=self._y)
        self.dashboard.with_panel(panel)
        self._x += width
        self._line_height = max(self._line_height, height)
        if self._x >= GRID_WIDTH:
            self._new_line()


# What each GPU needs now, by action: the driver's recovery verdict, the memory repair
# state and the XIDs of the last hour with their Xid Catalog action (a counter born at
# its first event counts too), as the action alerts read them.
_BY_GPU = "host_name, gpu_index, hw_id, action"
NEEDS_ACTION = (
    f'max by ({_BY_GPU}) (hw_gpu_recovery_action{{action!="none", {SEL}}} == 1)'
    f' or max by ({_BY_GPU}) (label_replace(hw_gpu_memory_row_remap_failure{{{SEL}}} == 1,'
    ' "action", "replace_gpu", "", ""))'
    f' or max by ({_BY_GPU}) (label_replace(hw_gpu_memory_row_remap_pending{{{SEL}}} == 1,'
    ' "action", "gpu_reset", "", ""))'
    f' or max by ({_BY_GPU}) ('
    f'(increase(hw_gpu_xid_errors_total{{action!="ignore", {SEL}}}[1h]) > 0)'
    f' or (hw_gpu_xid_errors_total{{action!="ignore", {SEL}}} > 0'
    f' unless hw_gpu_xid_errors_total{{action!="ignore", {SEL}}} offset 1h))'
)


def _needs_action(b: Board) -> None:
    b.row("Needs action")
    b.add(bargauge("GPUs by action", "none",
                   (f"count by (action) ({NEEDS_ACTION})", "{{action}}"),
                   description="GPUs that need something done, by what: the driver's "
                   "recovery action (gpu_reset, node_reboot, ...), the memory repair state "
                   "(gpu_reset: a row remap pending; replace_gpu: no spare rows left) and "
                   "the Xid Catalog action of the last hour's XIDs (restart_app, reset_gpu, "
                   "restart_bm, unknown, ...). docs/runbooks.md says what to do."), 8, 8)
    b.add(table("GPUs that need action, per host", "none", (NEEDS_ACTION, ""),
                description="One row per GPU and action; owner and steps in the "
                "GpuApplicationFault, GpuResetRequired, GpuNodeRebootRequired, "
                "GpuRowRemapFailure and GpuXidUnclassified runbooks."), 16, 8)


def fleet() -> Board:
    b = Board("gpu-fleet-overview", "GPU fleet overview",
              "Utilization, memory, power, temperature, clocks, errors and health of every "
              "GPU, by host, team and GPU.", ["fleet"])
    b.row("Fleet")
    b.add(stat("GPUs answering", "none", (f"sum(hw_gpu_up{{{SEL}}})", "up")), 6, 4)
    b.add(stat("GPUs not answering", "none",
               (f"count(hw_gpu_up{{{SEL}}} == 0) or vector(0)", "down")), 6, 4)
    b.add(stat("Mean utilization", "percentunit",
               (f'avg(hw_gpu_utilization_ratio{{hw_gpu_task="general", {SEL}}})', "")), 6, 4)
    b.add(stat("Power drawn", "watt", (f"sum(hw_gpu_power_draw_watts{{{SEL}}})", "")), 6, 4)
    b.add(table("Health state", "none", (f"hw_status{{{SEL}}} == 1", ""),
                description="The one hw_state that is 1 for each GPU (ok, degraded, failed)."),
          24, 6)
    b.add(table("Inventory", "none", (f"hw_gpu_info{{{SEL}}}", "")), 24, 6)
    _needs_action(b)
    b.row("Utilization")
    b.add(timeseries("Utilization per GPU", "percentunit",
                     (f'hw_gpu_utilization_ratio{{hw_gpu_task="general", {SEL}}}',
                      "{{host_name}} GPU {{gpu_index}}"),
                     description="General (compute/graphics) engine busy fraction."))
    b.add(timeseries("Utilization by team (5 min average)", "percentunit",
                     ('team:hw_gpu_utilization_ratio:avg5m{team=~"$team"}', "{{team}}")))
    b.add(timeseries("Utilization by host (5 min average)", "percentunit",
                     ('host_name:hw_gpu_utilization_ratio:avg5m{host_name=~"$host"}',
                      "{{host_name}}")))
    b.add(timeseries("Encoder and decoder utilization", "percentunit",
                     (f'hw_gpu_utilization_ratio{{hw_gpu_task=~"encoder|decoder", {SEL}}}',
                      "{{host_name}} GPU {{gpu_index}} {{hw_gpu_task}}")))
    b.add(timeseries("Memory controller utilization", "percentunit",
                     (f"hw_gpu_memory_controller_utilization_ratio{{{SEL}}}",
                      "{{host_name}} GPU {{gpu_index}}")))
    _efficiency(b)
    b.row("Memory")
    b.add(timeseries("Memory used", "bytes",
                     (f"hw_gpu_memory_usage_bytes{{{SEL}}}", "{{host_name}} GPU {{gpu_index}}")))
    b.add(timeseries("Memory used / size", "percentunit",
                     (f"hw_gpu_memory_usage_bytes{{{SEL}}} / hw_gpu_memory_limit_bytes{{{SEL}}}",
                      "{{host_name}} GPU {{gpu_index}}")))
    b.add(timeseries("Memory per process", "bytes",
                     (f"process_gpu_memory_usage_bytes{{{SEL}}}",
                      "{{host_name}} GPU {{gpu_index}} {{process_executable_name}} "
                      "{{process_pid}}")))
    b.row("Power, temperature, clocks")
    b.add(timeseries("Power draw and limit", "watt",
                     (f"hw_gpu_power_draw_watts{{{SEL}}}", "{{host_name}} GPU {{gpu_index}} draw"),
                     (f"hw_gpu_power_limit_watts{{{SEL}}}",
                      "{{host_name}} GPU {{gpu_index}} limit")))
    b.add(timeseries("Temperature", "celsius",
                     (f"hw_gpu_temperature_celsius{{{SEL}}}",
                      "{{host_name}} GPU {{gpu_index}} {{sensor}}")))
    b.add(timeseries("Clocks", "hertz",
                     (f"hw_gpu_clock_hertz{{{SEL}}}",
                      "{{host_name}} GPU {{gpu_index}} {{hw_gpu_clock_domain}}")))
    b.add(timeseries("Fan speed", "percentunit",
                     (f"hw_gpu_fan_speed_ratio{{{SEL}}}",
                      "{{host_name}} GPU {{gpu_index}} fan {{fan}}")))
    b.add(timeseries("Clock throttle reasons active", "none",
                     (f"hw_gpu_clock_throttle_active{{{SEL}}}",
                      "{{host_name}} GPU {{gpu_index}} {{reason}}"),
                     description="1 while the reason limits the clocks; sw_power_cap under load "
                     "is normal, hw_thermal/sw_thermal/hw_power_brake are not."))
    node_power(b)
    b.row("Interconnect: PCIe and NVLink")
    b.add(timeseries("PCIe traffic", "Bps",
                     (f"rate(hw_gpu_io_bytes_total{{{SEL}}}[{RI}])",
                      "{{host_name}} GPU {{gpu_index}} {{network_io_direction}}")))
    b.add(timeseries("PCIe link width", "none",
                     (f"hw_gpu_pcie_current_link_width{{{SEL}}}",
                      "{{host_name}} GPU {{gpu_index}} current"),
                     (f"hw_gpu_pcie_max_link_width{{{SEL}}}",
                      "{{host_name}} GPU {{gpu_index}} max"),
                     description="Lanes of the card-to-slot link. AMD cards narrow it at idle; "
                     "narrower than max under load means a reseat or riser problem."))
    b.add(timeseries("PCIe link speed", "short",
                     (f"hw_gpu_pcie_current_link_transfers_per_second{{{SEL}}}",
                      "{{host_name}} GPU {{gpu_index}} current"),
                     (f"hw_gpu_pcie_max_link_transfers_per_second{{{SEL}}}",
                      "{{host_name}} GPU {{gpu_index}} max"),
                     description="Transfers per second per lane (16 G = PCIe 4.0). Every "
                     "vendor lowers it at idle."))
    b.add(table("PCIe links narrower than their maximum", "none",
                (f"hw_gpu_pcie_current_link_width{{{SEL}}} < hw_gpu_pcie_max_link_width{{{SEL}}}",
                 ""),
                description="Current lanes of each GPU whose link trained below what the card "
                "and its slot allow (idle AMD cards included)."))
    b.add(timeseries("NVLink traffic", "Bps",
                     (f"sum without (nvlink) (rate(hw_gpu_nvlink_io_bytes_total{{{SEL}}}[{RI}]))",
                      "{{host_name}} GPU {{gpu_index}} {{network_io_direction}}"),
                     description="Payload over all NVLinks of each GPU."))
    b.add(timeseries("NVLinks by state", "none",
                     (f"sum without (nvlink) (hw_gpu_nvlink_links{{{SEL}}})",
                      "{{host_name}} GPU {{gpu_index}} {{nvlink_state}}"),
                     description="Links per GPU in each state; sleep is a healthy idle link."))
    b.add(timeseries("NVLink errors", "short",
                     (f"sum without (nvlink) "
                      f'(increase(hw_errors_total{{error_type=~"nvlink_.*", {SEL}}}[{RI}]))',
                      "{{host_name}} GPU {{gpu_index}} {{error_type}}"),
                     description="New errors per interval: CRC errors cause replays; "
                     "recoveries retrain a link."))
    b.row("Errors")
    b.add(timeseries("Hardware errors", "short",
                     (f"sum by (host_name, gpu_index, error_type) "
                      f"(increase(hw_errors_total{{{SEL}}}[{RI}]))",
                      "{{host_name}} GPU {{gpu_index}} {{error_type}}"),
                     description="New errors per interval; uncorrected ECC means: take the card "
                     "out."))
    b.add(table("Errors since reset", "short", (f"hw_errors_total{{{SEL}}}", "")))
    b.add(timeseries("XID events", "short",
                     (f"sum by (host_name, gpu_index, xid) "
                      f"(increase(hw_gpu_xid_errors_total{{{SEL}}}[{RI}]))",
                      "{{host_name}} GPU {{gpu_index}} XID {{xid}}")))
    b.add(timeseries("GPU answering", "none",
                     (f"hw_gpu_up{{{SEL}}}", "{{host_name}} GPU {{gpu_index}}")))
    _job_health(b)
    return b


# A job's labels in the straggler pack (alerts/gpu-straggler.rules.yml): a Slurm job, or a
# pod owner from kube-state-metrics.
_BY_JOB = "slurm_job_id, k8s_namespace_name, owner_kind, owner_name"
_JOB_LEGEND = "{{slurm_job_id}}{{k8s_namespace_name}} {{owner_kind}} {{owner_name}}"


def _job_health(b: Board) -> None:
    """Each job's GPUs against each other (the straggler pack's standings): the one GPU that
    holds a synchronous job back."""
    b.row("Job health: the slowest GPU of each job")
    b.add(table("Slowest GPU of each job", "percentunit",
                (f"bottomk by ({_BY_JOB}) "
                 f"(1, gpu_job:hw_gpu_sm_clock:ratio_to_job_median{{{SEL}}})", ""),
                description="The GPU with the lowest SM clock against its job's median (busy "
                "GPUs only); under 90% for a minute fires GpuStraggler."), 12, 8)
    b.add(timeseries("SM clock of each job's slowest GPU", "percentunit",
                     (f"min by ({_BY_JOB}) "
                      f"(gpu_job:hw_gpu_sm_clock:ratio_to_job_median{{{SEL}}})", _JOB_LEGEND),
                     description="Its share of the job's median clock; the stated jitter "
                     "is ±3%.").min(0.5).max(1.1), 12, 8)
    b.add(timeseries("Utilization of each job's least busy GPU", "percentunit",
                     (f"min by ({_BY_JOB}) "
                      f"(gpu_job:hw_gpu_utilization:diff_from_job_median{{{SEL}}})",
                      _JOB_LEGEND),
                     description="Its utilization minus the job's median, while the job "
                     "works; under -40 points: a rank waiting on its host."), 8, 8)
    b.add(timeseries("Clock events of each job's most held GPU", "percentunit",
                     (f"max by ({_BY_JOB}) "
                      f"(gpu_job:hw_gpu_clock_event_time:diff_from_job_median{{{SEL}}})",
                      _JOB_LEGEND),
                     description="Share of the last 5 minutes under a clock-event reason "
                     "other than idle, minus the job's median GPU's."), 8, 8)
    b.add(timeseries("PCIe and NVLink errors of each job's worst GPU", "short",
                     (f"max by ({_BY_JOB}) "
                      f"(gpu_job:hw_errors_pcie:excess_per_minute{{{SEL}}})",
                      f"PCIe {_JOB_LEGEND}"),
                     (f"max by ({_BY_JOB}) "
                      f"(gpu_job:hw_errors_nvlink:excess_per_minute{{{SEL}}})",
                      f"NVLink {_JOB_LEGEND}"),
                     description="Errors per minute beyond the job's median GPU (5 minutes)."),
          8, 8)


def _efficiency(b: Board) -> None:
    """Utilization (a kernel was running) against what the GPU really did: SM, tensor and
    DRAM activity from GPM (NVIDIA Hopper and newer; other GPUs have none)."""
    # One row per GPU (or MIG GPU instance): the four queries reduced to the same labels,
    # merged into one table.
    by = "max by (host_name, gpu_index, hw_id, gpu_mig_profile, gpu_instance_id)"
    columns = {"Value #A": "utilization", "Value #B": "SM active", "Value #C": "tensor active",
               "Value #D": "DRAM active"}
    whole = f'hw_parent="", gpu_instance_id="", {SEL}'  # MIG instances would count twice
    b.row("Efficiency")
    b.add(table("Utilization against SM, tensor and DRAM activity", "percentunit",
                (f'{by} (hw_gpu_utilization_ratio{{hw_gpu_task="general", {SEL}}})', ""),
                (f"{by} (hw_gpu_sm_active_ratio{{{SEL}}})", ""),
                (f"{by} (hw_gpu_tensor_active_ratio{{{SEL}}})", ""),
                (f"{by} (hw_gpu_dram_active_ratio{{{SEL}}})", ""),
                description="Utilization is the share of time any kernel ran; SM active the "
                "share of SMs busy (DCGM_FI_PROF_SM_ACTIVE), tensor active any tensor pipe "
                "(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE), DRAM active the memory bandwidth used "
                "(DCGM_FI_PROF_DRAM_ACTIVE). High utilization with low SM activity: the GPU "
                "is held by little work. GPM values need NVIDIA Hopper or newer.")
          .with_transformation(dashboard.DataTransformerConfig(id_val="merge", options={}))
          .with_transformation(dashboard.DataTransformerConfig(
              id_val="organize", options={"renameByName": columns})), 24, 8)
    b.add(timeseries("Utilization against activity by team (5 min average)", "percentunit",
                     ('team:hw_gpu_utilization_ratio:avg5m{team=~"$team"}',
                      "{{team}} utilization"),
                     ('team:hw_gpu_sm_active_ratio:avg5m{team=~"$team"}', "{{team}} SM active"),
                     ('team:hw_gpu_tensor_active_ratio:avg5m{team=~"$team"}',
                      "{{team}} tensor active"),
                     (f"avg by (team) (avg_over_time(hw_gpu_dram_active_ratio{{{whole}}}[5m]))",
                      "{{team}} DRAM active")))
    b.add(timeseries("SM active per GPU", "percentunit",
                     (f"hw_gpu_sm_active_ratio{{{SEL}}}",
                      "{{host_name}} GPU {{gpu_index}} {{gpu_mig_profile}}{{gpu_instance_id}}"),
                     description="Share of SMs busy, averaged over the time since the "
                     "previous scrape. MIG: per GPU instance."))
    b.add(timeseries("Tensor and DRAM active per GPU", "percentunit",
                     (f"hw_gpu_tensor_active_ratio{{{SEL}}}",
                      "{{host_name}} GPU {{gpu_index}} {{gpu_mig_profile}}{{gpu_instance_id}} "
                      "tensor"),
                     (f"hw_gpu_dram_active_ratio{{{SEL}}}",
                      "{{host_name}} GPU {{gpu_index}} {{gpu_mig_profile}}{{gpu_instance_id}} "
                      "DRAM")))
    b.add(timeseries("Pipe activity per GPU", "percentunit",
                     (f"hw_gpu_pipe_active_ratio{{{SEL}}}",
                      "{{host_name}} GPU {{gpu_index}} {{gpu_instance_id}} {{hw_gpu_pipe}}"),
                     description="Share of time each pipe was busy: tensor_hmma (FP16/BF16 "
                     "tensor cores), tensor_imma (integer), tensor_dfma/tensor_dmma "
                     "(FP64), and the fp64, fp32, fp16 and integer pipes outside tensor "
                     "cores."))
    b.add(timeseries("SM occupancy per GPU", "percentunit",
                     (f"hw_gpu_sm_occupancy_ratio{{{SEL}}}",
                      "{{host_name}} GPU {{gpu_index}} {{gpu_mig_profile}}{{gpu_instance_id}}"),
                     description="Resident warps over the SMs' maximum "
                     "(DCGM_FI_PROF_SM_OCCUPANCY)."))


def cost() -> Board:
    b = Board("gpu-cost-energy", "GPU cost & energy",
              "Idle spend, energy and energy cost, by team, host and GPU, and who pays: by "
              "namespace, pod and Slurm job. Prices come from alerts/gpu-prices.rules.yml "
              "(recording rules).", ["cost"])
    g = f"gpu:gpu_idle_cost_dollars_per_hour{{{SEL}}}"
    kwh = f"sum(increase(hw_gpu_energy_consumed_joules_total{{{SEL}}}[$__range])) / 3.6e6"
    b.row("Idle spend")
    b.add(stat("Idle spend now", "currencyUSD", (f"sum({g})", ""),
               description="Dollars per hour paid for the idle share of the selected GPUs."),
          8, 4)
    b.add(stat("Energy, selected range", "kwatth", (kwh, "")), 8, 4)
    b.add(stat("Energy cost, selected range", "currencyUSD",
               (f"{kwh} * scalar(energy:price_dollars_per_kwh)", "")), 8, 4)
    b.add(timeseries("Idle spend by team", "currencyUSD",
                     ('team:gpu_idle_cost_dollars_per_hour{team=~"$team"}', "{{team}}"),
                     description="Dollars per hour: (1 - utilization) x price per GPU-hour."))
    b.add(timeseries("Idle spend per GPU", "currencyUSD",
                     (g, "{{host_name}} GPU {{gpu_index}} {{hw_name}}")))
    b.add(bargauge("Idle spend by host", "currencyUSD",
                   ('host_name:gpu_idle_cost_dollars_per_hour{host_name=~"$host"}',
                    "{{host_name}}")))
    b.add(table("Price per GPU-hour by model", "currencyUSD",
                ("gpu:price_dollars_per_gpu_hour", ""),
                description="Edit in alerts/gpu-prices.rules.yml."))
    b.row("Energy")
    b.add(timeseries("Energy per hour by team", "kwatth",
                     ('team:hw_gpu_energy_kwh:increase1h{team=~"$team"}', "{{team}}")))
    b.add(timeseries("Energy per hour by host", "kwatth",
                     ('host_name:hw_gpu_energy_kwh:increase1h{host_name=~"$host"}',
                      "{{host_name}}")))
    b.add(bargauge("Energy by host, selected range", "kwatth",
                   (f"sum by (host_name) (increase(hw_gpu_energy_consumed_joules_total{{{SEL}}}"
                    f"[$__range])) / 3.6e6", "{{host_name}}")))
    b.add(timeseries("Power by team", "watt",
                     (f"sum by (team) (hw_gpu_power_draw_watts{{{SEL}}})", "{{team}}")))
    b.row("Energy cost")
    b.add(timeseries("Energy cost per hour by team", "currencyUSD",
                     ('team:hw_gpu_energy_cost_dollars:increase1h{team=~"$team"}', "{{team}}")))
    b.add(timeseries("Energy cost per hour by host", "currencyUSD",
                     ('host_name:hw_gpu_energy_cost_dollars:increase1h{host_name=~"$host"}',
                      "{{host_name}}")))
    who_pays(b)
    return b


# The node's own series (no GPU: hw_id is a socket or module), and its CPU-side rails that
# add up without counting one twice (docs/node-power.md).
NODE = 'host_name=~"$host", team=~"$team"'
CPU_SIDE = 'hw_power_rail=~"socket|package|dram"'
# Slurm jobs holding a whole node: the only job with GPU processes on it (docs/attribution.md)
WHOLE_NODE_JOBS = (
    'group by (host_name, slurm_job_id) (process_gpu_memory_usage_bytes{slurm_job_id!=""}) '
    "and on (host_name) count by (host_name) (group by (host_name, slurm_job_id) "
    '(process_gpu_memory_usage_bytes{slurm_job_id!=""})) == 1')


def node_power(b: Board) -> None:
    """srt-slurm's benchmark view: power per host and per Slurm job, the GPUs and the rest
    of the node, at the scrape's own resolution (1 s there)."""
    b.row("Node power: hosts and Slurm jobs")
    b.add(timeseries("Power per host: GPUs and CPU side", "watt",
                     (f"sum by (host_name) (hw_gpu_power_draw_watts{{{SEL}}})",
                      "{{host_name}} GPUs"),
                     (f"sum by (host_name) (hw_power_watts{{{NODE}, {CPU_SIDE}}})",
                      "{{host_name}} CPU side"),
                     description="CPU side: each socket's envelope (ACPI socket or RAPL "
                     "package) plus its DRAM; docs/node-power.md."))
    b.add(timeseries("Node power rails", "watt",
                     (f"hw_power_watts{{{NODE}}}",
                      "{{host_name}} {{hw_id}} {{hw_power_rail}}"),
                     description="Every rail as its source names it. Rails nest (socket > "
                     "cpu, sysio; package > core; module and system hold the GPUs): do not "
                     "add them up."))
    b.add(timeseries("Power per Slurm job: GPUs and CPU side", "watt",
                     (f'sum by (slurm_job_id) (rate(process_gpu_energy_consumed_joules_total'
                      f'{{{SEL}, slurm_job_id!=""}}[{RI}]))', "job {{slurm_job_id}} GPUs"),
                     (f"sum by (slurm_job_id) (sum by (host_name) (hw_power_watts{{{NODE}, "
                      f"{CPU_SIDE}}}) * on (host_name) group_right () ({WHOLE_NODE_JOBS}))",
                      "job {{slurm_job_id}} CPU side"),
                     description="CPU side only for jobs that hold their nodes alone "
                     "(docs/attribution.md)."))
    b.add(bargauge("Energy per Slurm job, selected range", "kwatth",
                   ('sum by (slurm_job_id) (increase(process_gpu_energy_consumed_joules_total'
                    f'{{{SEL}, slurm_job_id!=""}}[$__range])) / 3.6e6',
                    "job {{slurm_job_id}} GPUs"),
                   ("sum by (slurm_job_id) (sum_over_time("
                    "host_name_slurm_job_id:hw_non_gpu_power_watts[$__range])) * 60 / 3.6e6",
                    "job {{slurm_job_id}} CPU side")))


def who_pays(b: Board) -> None:
    """The breakdowns of docs/attribution.md: energy each process was charged, summed by
    namespace, pod and Slurm job; what the GPUs held by pods cost; the GPUs held but idle;
    the share of the energy no process was charged for."""
    energy = "process_gpu_energy_consumed_joules_total"
    by_range = (f"sum by ({{by}}) (increase({energy}{{{{{SEL}, {{sel}}}}}}[$__range])) "
                "/ 3.6e6")
    b.row("Who pays: namespaces, pods, Slurm jobs")
    b.add(bargauge("Energy by namespace, selected range", "kwatth",
                   (by_range.format(by="k8s_namespace_name", sel='k8s_namespace_name!=""'),
                    "{{k8s_namespace_name}}"),
                   description="Energy split among the processes on each GPU by their share "
                   "of its activity (docs/attribution.md), summed per namespace."), 8)
    b.add(bargauge("Energy by Slurm job, selected range", "kwatth",
                   (by_range.format(by="slurm_job_id", sel='slurm_job_id!=""'),
                    "job {{slurm_job_id}}")), 8)
    b.add(stat("Energy no process was charged for, selected range", "percentunit",
               (f"sum(increase(hw_gpu_energy_unattributed_joules_total{{{SEL}}}[$__range])) / "
                f"sum(increase(hw_gpu_energy_consumed_joules_total{{{SEL}}}[$__range]))", ""),
               description="The unattributed share: free GPUs (no_process) and GPUs whose "
               "per-process activity the driver does not give (no_activity_data)."), 8)
    b.add(timeseries("Energy cost per hour by namespace", "currencyUSD",
                     ("k8s_namespace_name:process_gpu_energy_cost_dollars:increase1h",
                      "{{k8s_namespace_name}}")))
    b.add(timeseries("GPU-hour cost per hour by namespace", "currencyUSD",
                     ("k8s_namespace_name:k8s_gpu_allocation_cost_dollars:increase1h",
                      "{{k8s_namespace_name}}"),
                     description="Price per GPU-hour of the GPUs the kubelet gave the "
                     "namespace's pods, used or not."))
    b.add(table("Pods: energy and cost, last day", "currencyUSD",
                ("k8s_pod_name:process_gpu_energy_cost_dollars:increase1d", "energy"),
                ("k8s_pod_name:k8s_gpu_allocation_cost_dollars:increase1d", "GPU-hours"),
                description="Dollars over the last day per pod: the energy its processes "
                "were charged, and the price of the GPUs it held."), 12)
    b.add(table("Slurm jobs: energy and cost, last day", "currencyUSD",
                ("slurm_job_id:process_gpu_energy_cost_dollars:increase1d", "energy")), 12)
    b.add(table("GPUs held but idle", "currencyUSD",
                (f"k8s_pod_name:gpu_allocated_idle_cost_dollars_per_hour{{{SEL}}}", ""),
                description="Allocated to a pod, no SM activity (or utilization), power "
                "under 30% of the limit: dollars per hour each costs. GpuAllocatedButIdle "
                "fires after 30 minutes."), 12)
    b.add(timeseries("Unattributed energy by reason", "watt",
                     (f"sum by (reason) (rate(hw_gpu_energy_unattributed_joules_total"
                      f"{{{SEL}}}[{RI}]))", "{{reason}}")), 12)


def _quantile(q: float, metric: str, by: str, selector: str = HOST_TEAM) -> str:
    return (f"histogram_quantile({q}, sum by (le, {by}) "
            f"(rate({metric}_bucket{{{selector}}}[{RI}])))")


def cuda() -> Board:
    b = Board("gpu-cuda-kernels", "CUDA kernels",
              "CUDA activity seen by the exporter's eBPF probes: launches, copies, "
              "allocations, synchronisation.", ["cuda", "ebpf"])
    s = HOST_TEAM
    exe = "process_executable_name"
    b.row("Launches")
    b.add(timeseries("Top kernels by launch rate", "ops",
                     (f"topk(10, sum by (cuda_kernel_name) "
                      f"(rate(gpu_kernel_launch_calls_total{{{s}}}[{RI}])))",
                      "{{cuda_kernel_name}}")))
    b.add(timeseries("Launch rate by program and API", "ops",
                     (f"sum by (host_name, process_executable_name, cuda_api) "
                      f"(rate(gpu_kernel_launch_calls_total{{{s}}}[{RI}]))",
                      "{{host_name}} {{process_executable_name}} {{cuda_api}}")))
    b.add(timeseries("Grid size (median, p99)", "short",
                     (_quantile(0.5, "gpu_kernel_grid_size", exe),
                      "{{process_executable_name}} p50"),
                     (_quantile(0.99, "gpu_kernel_grid_size", exe),
                      "{{process_executable_name}} p99"),
                     description="Blocks per grid."))
    b.add(timeseries("Block size (median)", "short",
                     (_quantile(0.5, "gpu_kernel_block_size", exe),
                      "{{process_executable_name}}"),
                     description="Threads per block."))
    b.add(timeseries("Kernel duration bound (p90)", "s",
                     (_quantile(0.9, "gpu_kernel_duration_seconds",
                                "cuda_kernel_name, completion"),
                      "{{cuda_kernel_name}} ({{completion}})"),
                     description="An upper bound on each launch's execution time, from the "
                     "first completion point seen to cover it: the application's own events "
                     "and stream queries (completion=event, tight where it polls) or a "
                     "synchronise (sync_fallback, loose). Never below the true time; "
                     "docs/ebpf.md has the error bars."))
    b.row("Memory copies and allocations")
    b.add(timeseries("Copy throughput by direction", "Bps",
                     (f"sum by (cuda_memcpy_kind) "
                      f"(rate(gpu_memory_copies_bytes_sum{{{s}}}[{RI}]))",
                      "{{cuda_memcpy_kind}}")))
    b.add(heatmap("Copy size distribution", "bytes",
                  (f"sum by (le) (increase(gpu_memory_copies_bytes_bucket{{{s}}}[{RI}]))",
                   "{{le}}")))
    b.add(timeseries("Copies per second by direction", "ops",
                     (f"sum by (cuda_memcpy_kind) "
                      f"(rate(gpu_memory_copies_bytes_count{{{s}}}[{RI}]))",
                      "{{cuda_memcpy_kind}}")))
    b.add(timeseries("Allocation size (median, p99)", "bytes",
                     (_quantile(0.5, "gpu_memory_allocations_bytes", exe),
                      "{{process_executable_name}} p50"),
                     (_quantile(0.99, "gpu_memory_allocations_bytes", exe),
                      "{{process_executable_name}} p99")))
    b.add(timeseries("Bytes allocated per second", "Bps",
                     (f"sum by (process_executable_name, cuda_api, cuda_memory_type) "
                      f"(rate(gpu_memory_allocations_bytes_sum{{{s}}}[{RI}]))",
                      "{{process_executable_name}} {{cuda_api}} {{cuda_memory_type}}")))
    b.row("Synchronisation")
    b.add(timeseries("Time blocked in synchronising calls", "s",
                     (f"sum by (cuda_sync_call) (rate(gpu_sync_duration_seconds_sum{{{s}}}"
                      f"[{RI}]))", "{{cuda_sync_call}}"),
                     description="Seconds blocked per second, summed over threads."))
    b.add(timeseries("Sync call duration (p99)", "s",
                     (_quantile(0.99, "gpu_sync_duration_seconds", "cuda_sync_call"),
                      "{{cuda_sync_call}}")))
    return b


def health() -> Board:
    b = Board("gpu-exporter-health", "GPU exporter health",
              "Is the exporter itself healthy: scrapes, collectors, features, eBPF.",
              ["exporter"], extra_variables=(job_variable(),))
    h = HOST_TEAM
    b.row("Scrapes and collectors")
    b.add(timeseries("Exporter targets up", "none", (f"up{{{JOB}}}", "{{instance}}"),
                     description="Every target of the scrape jobs picked in Job (those that "
                     "scrape a gpu-exporter; the alert pack's exporter_selector)."))
    b.add(timeseries("Scrape duration", "s",
                     (f"scrape_duration_seconds{{{JOB}}}", "{{instance}}")))
    b.add(timeseries("Collector success", "none",
                     (f"gpu_exporter_collector_success{{{h}}}", "{{host_name}} {{collector}}")))
    b.add(timeseries("Collector duration", "s",
                     (f"gpu_exporter_collector_duration_seconds{{{h}}}",
                      "{{host_name}} {{collector}}")))
    b.add(table("Feature status", "none", (f"gpu_exporter_feature_status{{{h}}} == 1", ""),
                description="enabled / unavailable (with the reason in the log and "
                "`gpu-exporter doctor`) / disabled."), 24, 8)
    b.add(table("Build", "none", (f"gpu_exporter_build_info{{{h}}}", "")), 24, 5)
    b.row("eBPF")
    b.add(timeseries("Attached CUDA libraries", "short",
                     (f"gpu_exporter_ebpf_attached_libraries{{{h}}}",
                      "{{host_name}} {{library}}")))
    b.add(timeseries("eBPF events dropped", "ops",
                     (f"sum by (host_name, reason) "
                      f"(rate(gpu_exporter_ebpf_events_dropped_total{{{h}}}[{RI}]))",
                      "{{host_name}} {{reason}}")))
    b.add(timeseries("Launches beyond the kernel-name cap", "ops",
                     (f"rate(gpu_exporter_ebpf_kernel_names_overflow_total{{{h}}}[{RI}])",
                      "{{host_name}}")))
    return b


BOARDS = {"fleet-overview.json": fleet, "cost-energy.json": cost,
          "cuda-kernels.json": cuda, "exporter-health.json": health}


def render() -> dict[str, str]:
    encoder = JSONEncoder(sort_keys=True, indent=2)
    return {name: encoder.encode(make().dashboard.build()) + "\n"
            for name, make in BOARDS.items()}


if __name__ == "__main__":
    for name, text in render().items():
        (HERE / name).write_text(text)
        print(name, file=sys.stderr)
