"""deploy/vmagent: the scrape config and the command line load in the vmagent CI installs,
and the stream-aggregation config says what the issue asks (per-process labels dropped from
the eBPF families, kernel names kept).

Debian 12's vmagent (1.79.5) predates stream aggregation, so stream-aggr.yml cannot be
loaded here: its checks below are static (structure, names from the catalogue), and the
command line is proven to start vmagent either way (the e2e runs vmagent through it)."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import yaml

from gpu_exporter.model.catalogue import BY_NAME, PROCESS_LABELS, Kind, Scope
from tests.e2e.conftest import RUN_VMAGENT, Stack
from tests.helpers import REPO, require_tool

DEPLOY = REPO / "deploy" / "vmagent"
# The outputs vmagent documents for stream aggregation.
OUTPUTS = {"total", "total_prometheus", "increase", "increase_prometheus", "count_series",
           "count_samples", "unique_samples", "sum_samples", "last", "min", "max", "avg",
           "stddev", "stdvar", "histogram_bucket", "rate_sum", "rate_avg"}
KEYS = {"match", "interval", "without", "by", "outputs", "keep_metric_names", "name",
        "dedup_interval", "staleness_interval", "flush_on_shutdown", "ignore_old_samples",
        "input_relabel_configs", "output_relabel_configs", "drop_input_labels"}


def _supports_stream_aggr() -> bool:
    res = subprocess.run([require_tool("vmagent"), "-help"], capture_output=True, text=True,
                         timeout=30)
    return "-remoteWrite.streamAggr.config" in res.stdout + res.stderr


def test_scrape_config_loads_in_vmagent() -> None:
    res = subprocess.run([require_tool("vmagent"), f"-promscrape.config={DEPLOY / 'scrape.yml'}",
                          "-dryRun"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = yaml.safe_load((DEPLOY / "scrape.yml").read_text())
    assert [j["job_name"] for j in doc["scrape_configs"]] == ["gpu-exporter"]


def test_stream_aggregation_drops_process_labels_and_keeps_kernel_names() -> None:
    rules: list[dict[str, Any]] = yaml.safe_load((DEPLOY / "stream-aggr.yml").read_text())
    assert rules
    covered: set[str] = set()
    histograms = {m.name for m in BY_NAME.values() if m.kind is Kind.HISTOGRAM}
    for rule in rules:
        assert set(rule) <= KEYS, set(rule) - KEYS
        assert set(rule["outputs"]) <= OUTPUTS
        assert set(PROCESS_LABELS) & set(rule["without"]) >= {"process_pid",
                                                              "process_executable_name"}
        assert "cuda_kernel_name" not in rule["without"]
        assert "by" not in rule  # `by` would drop every label not listed, kernel names too
        assert rule["keep_metric_names"] is True and len(rule["outputs"]) == 1
        m = re.fullmatch(r"\{__name__(=~?)\"(.*)\"\}", rule["match"])
        assert m, rule["match"]
        pattern = re.compile(m.group(2) if m.group(1) == "=~" else re.escape(m.group(2)))
        for metric in BY_NAME.values():
            names = ([f"{metric.name}_{s}" for s in ("bucket", "sum", "count")]
                     if metric.name in histograms else [metric.name])
            if any(pattern.fullmatch(n) for n in names):
                assert metric.scope is Scope.CUDA, metric.name
                covered.add(metric.name)
    cuda = {m.name for m in BY_NAME.values() if m.scope is Scope.CUDA}
    assert covered == cuda, cuda - covered


def test_command_line_uses_stream_aggregation_only_where_vmagent_has_it(stack: Stack) -> None:
    """The e2e's vmagent was started by run-vmagent.sh and feeds VictoriaMetrics; on a
    vmagent without stream aggregation the script says so instead of failing to start."""
    args = stack.vmagent.proc.args
    assert isinstance(args, list) and args[0] == str(RUN_VMAGENT)
    assert stack.vm.query('up{job="gpu-exporter"} == 1')
    warned = "has no -remoteWrite.streamAggr.config" in stack.vmagent.logs()
    assert warned is not _supports_stream_aggr()
