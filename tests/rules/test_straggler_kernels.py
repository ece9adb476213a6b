"""The straggler pack's opt-in per-kernel group (alerts/kernels/): it loads in Prometheus and
vmalert, its unit test passes, it reads only families the exporter has (or the pack
records), and its runbook link is the pack's."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

from gpu_exporter.model.catalogue import BY_NAME, Kind
from tests.helpers import REPO, require_tool
from tests.rules.promql import family_names, strip_histogram_suffix
from tests.rules.rulefiles import load_rules, recorded_names

KERNELS = REPO / "alerts" / "kernels"
RULES = KERNELS / "gpu-straggler-kernels.rules.yml"
TESTS = sorted((KERNELS / "tests").glob("*.test.yml"))


def test_promtool_check_rules() -> None:
    res = subprocess.run([require_tool("promtool"), "check", "rules", str(RULES)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "SUCCESS: 2 rules found" in res.stdout, res.stdout + res.stderr


def test_vmalert_dry_run() -> None:
    res = subprocess.run([require_tool("vmalert"), "-dryRun", f"-rule={RULES}"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("path", TESTS, ids=[p.name for p in TESTS])
def test_promtool_unit_tests(path: Path) -> None:
    res = subprocess.run([require_tool("promtool"), "test", "rules", path.name],
                         cwd=path.parent, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "exp_alerts:\n          - exp_labels" in path.read_text()  # it fires somewhere


def test_it_reads_what_the_exporter_and_the_pack_have() -> None:
    rules = load_rules([RULES])
    histograms = {m.name for m in BY_NAME.values() if m.kind is Kind.HISTOGRAM}
    used = family_names([r.expr for r in rules], recorded_names() | {
        r.record for r in rules if r.record})
    assert "gpu_kernel_duration_seconds_sum" in used
    missing = {n for n in used if strip_histogram_suffix(n, histograms) not in BY_NAME}
    assert not missing, missing
    assert "gpu_job:membership:info" in " ".join(r.expr for r in rules)
    assert "gpu_job:membership:info" in recorded_names()  # the pack it needs


def test_its_runbook_links_are_the_packs() -> None:
    spec = importlib.util.spec_from_file_location("gen_k8s_rules",
                                                  REPO / "scripts" / "gen-k8s-rules.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for path in [RULES, *TESTS]:
        text = path.read_text()
        assert "runbooks.md#gpustraggler" in text, path
        assert gen.with_runbook_links(text) == text, f"{path}: runbook_url off the base URL"
