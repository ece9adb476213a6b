"""The alert pack's one setting, the exporter selector (as a monitoring mixin's _config): the
exporter alerts find the scrape targets only through it, and a pack rendered with another
selector alerts on a job of another name (a ServiceMonitor's job is its Service's name)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers import REPO, require_tool
from tests.rules.promql import metric_names
from tests.rules.rulefiles import ALERTS_DIR, RULE_FILES, UNIT_TEST_FILES, load_rules

SCRIPT = REPO / "scripts" / "gen-k8s-rules.py"
OTHER_JOB = "gpu-metrics"
EXPORTER_TESTS = ALERTS_DIR / "tests" / "workload-exporter.test.yml"


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_k8s_rules", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_only_the_exporter_selector_names_a_job() -> None:
    default = _generator().EXPORTER_SELECTOR
    readers = []
    for rule in load_rules():
        if default in rule.expr:
            readers.append(rule.alert)
            continue
        assert not re.search(r"\bjob\s*(=|!=|=~|!~)", rule.expr), rule.alert or rule.record
        assert not metric_names(rule.expr) & {"up", "scrape_duration_seconds"}, rule.alert
    assert sorted(readers) == ["GpuExporterAbsent", "GpuExporterDown"]


def _render(selector: str, out: Path) -> None:
    res = subprocess.run([sys.executable, str(SCRIPT), "--exporter-selector", selector,
                          "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def _promtool_test(pack: Path) -> subprocess.CompletedProcess[str]:
    """The exporter alerts' unit tests with the job renamed, run against `pack`."""
    tests = pack / "tests"
    tests.mkdir(exist_ok=True)
    # The job's name, not the project's in the runbook links' URL.
    text, n = re.subn(r"(?<!/)gpu-exporter\b(?!/)", OTHER_JOB, EXPORTER_TESTS.read_text())
    assert n >= 8, n  # series, expected labels and annotations
    (tests / EXPORTER_TESTS.name).write_text(text)
    return subprocess.run([require_tool("promtool"), "test", "rules", EXPORTER_TESTS.name],
                          cwd=tests, capture_output=True, text=True, timeout=120)


def test_a_pack_rendered_for_another_job_alerts_on_that_job(tmp_path: Path) -> None:
    assert EXPORTER_TESTS in UNIT_TEST_FILES
    _render(f'job="{OTHER_JOB}"', tmp_path / "renamed")
    assert sorted(p.name for p in (tmp_path / "renamed").glob("*.rules.yml")) == sorted(
        p.name for p in RULE_FILES)
    res = _promtool_test(tmp_path / "renamed")
    assert res.returncode == 0, res.stdout + res.stderr
    # and the shipped pack does not: the test above can fail.
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    for path in RULE_FILES:
        shutil.copy(path, shipped / path.name)
    res = _promtool_test(shipped)
    assert res.returncode != 0 and "GpuExporterDown" in res.stdout + res.stderr, res.stdout


def test_the_rendered_objects_carry_the_selector(tmp_path: Path) -> None:
    selector = f'namespace="monitoring", job="{OTHER_JOB}"'
    _render(selector, tmp_path)
    gen = _generator()
    for path, (_, kind) in gen.OUTPUTS.items():
        text = (tmp_path / path.name).read_text()
        assert f"kind: {kind}" in text
        assert text.count(selector) >= 3, path.name  # two expressions and a description
        assert gen.EXPORTER_SELECTOR not in text


def test_a_selector_that_is_not_label_matchers_is_refused(tmp_path: Path) -> None:
    for bad in ("job=gpu", 'up{job="x"}', 'job="x"}', ""):
        res = subprocess.run([sys.executable, str(SCRIPT), "--exporter-selector", bad,
                              "--out", str(tmp_path)], capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 2 and "label matchers" in res.stderr, (bad, res.stderr)
    assert not list(tmp_path.iterdir())
