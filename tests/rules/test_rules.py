"""The alert and recording rules load in Prometheus and vmalert, and every alert is
unit-tested with `promtool test rules`."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_exporter.model.catalogue import BY_NAME, Kind
from tests.helpers import REPO, require_tool
from tests.rules.promql import family_names, strip_histogram_suffix
from tests.rules.rulefiles import (
    RULE_FILES,
    RUNBOOKS,
    UNIT_TEST_FILES,
    load_rules,
    recorded_names,
)

# Families of kube-state-metrics, not of the exporter: the straggler pack joins a pod's GPUs
# to the pod's owner with them (the node cannot see owners). Only that pack reads them.
KUBE_STATE_METRICS = {"kube_pod_owner", "kube_pod_labels"}
SEVERITIES = {"critical", "warning", "info"}
CATEGORIES = {"cost", "capacity", "hardware", "workload", "exporter"}
ANNOTATIONS = {"summary", "description", "runbook_url"}


def _ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def test_the_pack_is_there() -> None:
    assert len(RULE_FILES) >= 3, RULE_FILES
    assert UNIT_TEST_FILES, "alerts/tests/*.test.yml"


@pytest.mark.parametrize("path", RULE_FILES, ids=_ids(RULE_FILES))
def test_promtool_check_rules(path: Path) -> None:
    res = subprocess.run([require_tool("promtool"), "check", "rules", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


@pytest.mark.parametrize("path", RULE_FILES, ids=_ids(RULE_FILES))
def test_vmalert_dry_run(path: Path) -> None:
    res = subprocess.run([require_tool("vmalert"), "-dryRun", f"-rule={path}"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_vmalert_dry_run_rejects_a_broken_expression(tmp_path: Path) -> None:
    """The dry run above proves something: vmalert fails on a bad expression."""
    bad = tmp_path / "bad.rules.yml"
    bad.write_text("groups:\n- name: x\n  rules:\n  - alert: A\n    expr: sum(rate(x[5m])\n")
    res = subprocess.run([require_tool("vmalert"), "-dryRun", f"-rule={bad}"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0


@pytest.mark.parametrize("path", UNIT_TEST_FILES, ids=_ids(UNIT_TEST_FILES))
def test_promtool_unit_tests(path: Path) -> None:
    res = subprocess.run([require_tool("promtool"), "test", "rules", path.name],
                         cwd=path.parent, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_unit_tests_fail_on_a_wrong_annotation(tmp_path: Path) -> None:
    """promtool compares annotations exactly: a one-word change in an expected annotation
    must fail, so the unit tests really pin what on-call engineers read."""
    src = UNIT_TEST_FILES[0]
    shutil.copytree(src.parent.parent, tmp_path / "alerts",
                    ignore=shutil.ignore_patterns("*.md"))
    copy = tmp_path / "alerts" / "tests" / src.name
    text = copy.read_text()
    link = re.search(r'runbook_url: "https://[^"#]+#', text)
    assert link, "the unit tests expect no runbook link"
    copy.write_text(text.replace(link.group(), 'runbook_url: "docs/x.md#', 1))
    res = subprocess.run([require_tool("promtool"), "test", "rules", copy.name],
                         cwd=copy.parent, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0, res.stdout


def _unit_tested_alerts() -> dict[str, tuple[int, int]]:
    """alertname -> (cases expecting it to fire, cases expecting silence)."""
    seen: dict[str, list[int]] = {}
    for path in UNIT_TEST_FILES:
        doc: dict[str, Any] = yaml.safe_load(path.read_text())
        for test in doc["tests"]:
            for case in test.get("alert_rule_test", []):
                counts = seen.setdefault(case["alertname"], [0, 0])
                counts[0 if case.get("exp_alerts") else 1] += 1
    return {k: (v[0], v[1]) for k, v in seen.items()}


def test_every_alert_fires_and_stays_silent_in_a_unit_test() -> None:
    tested = _unit_tested_alerts()
    alerts = [r.alert for r in load_rules() if r.alert]
    assert len(alerts) >= 12
    for name in alerts:
        fires, silent = tested.get(name, (0, 0))
        assert fires >= 1, f"{name}: no unit test where it fires"
        assert silent >= 1, f"{name}: no unit test where it stays silent"
    assert set(tested) <= set(alerts), f"tests name unknown alerts: {set(tested) - set(alerts)}"


def _anchors(markdown: str) -> set[str]:
    """GitHub heading anchors: lower case, punctuation dropped, spaces to dashes."""
    out = set()
    for line in markdown.splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            title = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            out.add(title.replace(" ", "-"))
    return out


def test_every_alert_has_labels_annotations_and_a_runbook() -> None:
    for rule in load_rules():
        if not rule.alert:
            continue
        assert rule.labels.get("severity") in SEVERITIES, rule.alert
        assert rule.labels.get("category") in CATEGORIES, rule.alert
        assert set(rule.annotations) >= ANNOTATIONS, rule.alert


def test_every_runbook_link_is_absolute_and_its_anchor_exists() -> None:
    """Clickable where on-call reads it (Alertmanager, Grafana): absolute, into the one
    base URL of pyproject.toml's Documentation, at a heading of docs/runbooks.md."""
    with open(REPO / "pyproject.toml", "rb") as f:
        docs = tomllib.load(f)["project"]["urls"]["Documentation"].rstrip("/")
    assert re.match(r"https://[^/]+/", docs), docs
    anchors = _anchors(RUNBOOKS.read_text())
    links = [(rule.alert, rule.annotations.get("runbook_url", ""))
             for rule in load_rules() if rule.alert]
    for path in UNIT_TEST_FILES:  # the annotations the unit tests expect, too
        links += [(path.name, url) for url in re.findall(r'runbook_url: "?([^"\s]+)',
                                                          path.read_text())]
    assert len(links) > 20
    for where, url in links:
        base, _, anchor = url.partition("#")
        assert base == f"{docs}/runbooks.md", (where, url)
        assert anchor in anchors, f"{where}: {url}: no such heading in docs/runbooks.md"
        if not where.endswith(".yml"):
            assert anchor == where.lower(), url


def test_a_pack_rendered_with_another_runbook_url_links_there(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, str(REPO / "scripts" / "gen-k8s-rules.py"),
                          "--runbook-url", "https://wiki.example.com/gpu/runbooks",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    rendered = load_rules(sorted(tmp_path.glob("*.rules.yml")))
    urls = [r.annotations["runbook_url"] for r in rendered if r.alert]
    assert urls and all(u == f"https://wiki.example.com/gpu/runbooks#{u.split('#')[1]}"
                        for u in urls), urls
    for name in ("prometheusrule.yaml", "vmrule.yaml"):
        assert "https://wiki.example.com/gpu/runbooks#gpudown" in (tmp_path / name).read_text()


def test_uncorrected_ecc_is_critical_and_corrected_is_not() -> None:
    """The mistake the issue names: a critical alert on corrected ECC errors."""
    for rule in load_rules():
        if not rule.alert:
            continue
        if 'error_type="corrected"' in rule.expr:
            assert rule.labels["severity"] != "critical", rule.alert
        if 'error_type="uncorrected"' in rule.expr:
            assert rule.labels["severity"] == "critical", rule.alert


def test_utilization_rules_read_only_the_general_engine() -> None:
    for rule in load_rules():
        if "hw_gpu_utilization_ratio{" in rule.expr or "hw_gpu_utilization_ratio[" in rule.expr:
            assert 'hw_gpu_task="general"' in rule.expr, rule.record or rule.alert


def test_every_metric_a_rule_reads_is_in_the_catalogue() -> None:
    """Drift: a renamed or removed family breaks the build, not the dashboards."""
    histograms = {m.name for m in BY_NAME.values() if m.kind is Kind.HISTOGRAM}
    used = family_names([r.expr for r in load_rules()], recorded_names())
    assert used, "no metric names found: the extractor is broken"
    missing = {n for n in used if strip_histogram_suffix(n, histograms) not in BY_NAME}
    assert not missing - KUBE_STATE_METRICS, (
        f"rules read metrics the exporter does not have: {sorted(missing)}")
    for rule in load_rules():
        if family_names([rule.expr], recorded_names()) & KUBE_STATE_METRICS:
            assert rule.file.name == "gpu-straggler.rules.yml", rule.record or rule.alert


def test_prices_live_in_one_file() -> None:
    """Cost rules read the price series; no other rule file carries a price of its own."""
    prices = [r for r in load_rules() if r.file.name == "gpu-prices.rules.yml"]
    assert {r.record for r in prices} == {"gpu:price_dollars_per_gpu_hour:default",
                                          "gpu:price_dollars_per_gpu_hour:by_model",
                                          "energy:price_dollars_per_kwh"}
    for rule in load_rules():
        if rule.file.name != "gpu-prices.rules.yml" and "dollar" in (rule.record or ""):
            assert "price_dollars" in rule.expr or "dollars" in rule.expr, rule.record
            assert not re.search(r"\b\d+\.\d+\b", rule.expr), f"{rule.record}: literal price"
