"""The series budget of spec/series-budget.yml, held in `make test`: counted from a real
exporter scraped by a real Prometheus evaluating every shipped rule file
(tests/budget/measure.py). Fails when a change grows any count past its budget, or leaves
a budget more than 5 % above what is measured (so that a cut lowers it)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.budget.measure import Measured, load_budget, measure, pack_name, rule_packs

SLACK = 1.05  # a budget may sit this far above the measured count, no further


@pytest.fixture(scope="module")
def measured() -> Measured:
    return measure()


def _check(what: str, got: float, budget: float) -> None:
    hint = (f"{what}: measured {got:g}, budget {budget:g} (spec/series-budget.yml). "
            "Cut series, or change the budget there and in docs/performance.md "
            "(\"Series budget\"), saying why")
    assert got <= budget, hint
    assert budget <= max(got * SLACK, got + 1), hint


def test_exporter_series_per_gpu_within_budget(measured: Measured) -> None:
    b = load_budget()
    ex = b["exporter"]
    assert measured.gpus == b["gpus_per_node"]
    assert measured.by_scope.get("unknown", 0) == 0, measured.by_scope
    _check("device series per GPU", measured.by_scope["device"] / measured.gpus,
           ex["device_per_gpu"])
    _check("series per GPU process", measured.by_scope["process"] / measured.processes,
           ex["process_per_process"])
    _check("host series per node", measured.by_scope["host"], ex["host_per_node"])
    _check("exporter self-metrics per node", measured.by_scope["self"], ex["self_per_node"])
    _check("scraper series per target", measured.scrape_series, ex["scrape_per_target"])


def test_recording_rule_series_per_pack_within_budget(measured: Measured) -> None:
    budget = load_budget()["rules_per_node"]
    missing = {k: v for k, v in measured.rules.items() if k not in budget}
    assert not missing, (f"rule files without a budget: {missing} (their series on the "
                         "budget node): add them to rules_per_node in spec/series-budget.yml")
    for pack, got in measured.rules.items():
        _check(f"recording-rule series of {pack} on the node", got, budget[pack])


def test_budget_names_every_rule_file_and_its_totals_add_up() -> None:
    """spec/series-budget.yml itself: a line per shipped rule file, and the per-GPU totals
    stated for each configuration are the sums of its lines."""
    b: dict[str, Any] = load_budget()
    shipped = {pack_name(p) for p in rule_packs()}
    assert set(b["rules_per_node"]) == shipped, (
        f"rule files without a budget line: {sorted(shipped - set(b['rules_per_node']))}; "
        f"lines without a file: {sorted(set(b['rules_per_node']) - shipped)}. "
        "`pytest tests/budget` measures each pack's series on the budget node")
    gpus, ex, rules = b["gpus_per_node"], b["exporter"], b["rules_per_node"]
    default_packs = [k for k in rules if "/" not in k]
    default = (ex["device_per_gpu"] + ex["process_per_process"]  # one process per GPU
               + (ex["host_per_node"] + ex["self_per_node"] + ex["scrape_per_target"]) / gpus
               + sum(rules[k] for k in default_packs) / gpus)
    assert b["per_gpu"]["default"] == pytest.approx(default, abs=0.05)
    dcgm = default + rules["dcgm/dcgm-compat.rules.yml"] / gpus
    assert b["per_gpu"]["with_dcgm_compat"] == pytest.approx(dcgm, abs=0.05)
    assert set(b["ebpf"]) == {"per_kernel_per_process", "per_process"}
