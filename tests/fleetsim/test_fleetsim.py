"""The fleet simulation's short variant, in `make test`: two real exporter nodes and three
replayed ones behind two vmagent shards, VictoriaMetrics and vmalert with the shipped
packs; the table comes out whole and says what the long run says (`make fleet-sim`)."""

from __future__ import annotations

import yaml

from tests.budget.measure import load_budget
from tests.dashboards.panels import queries
from tests.fleetsim.sim import Config, run, table
from tests.helpers import REPO


def test_short_fleet_simulation_prints_the_whole_table() -> None:
    cfg = Config(sizes=[2, 3], real=2, interval=2.0, window=4.0)
    results = run(cfg, log=False)
    exporter, replay = results
    assert (exporter.source, replay.source) == ("exporter", "replay")
    groups = {g["name"] for p in (REPO / "alerts").glob("*.yml")
              for g in yaml.safe_load(p.read_text())["groups"]}
    budget = load_budget()["per_gpu"]["default"]
    for r in results:
        # Every node scraped, by one of the two shards.
        assert sum(r.targets_per_shard) == r.nodes, r.targets_per_shard
        # Storage holds the budget's series per GPU, give or take the rules that need
        # more time than the short run has (and a budget-node process per GPU).
        assert 0.8 * budget <= r.series_per_gpu <= 1.1 * budget, r.series_per_gpu
        assert r.rule_series > 0
        assert r.samples_per_second > 0
        assert set(r.rule_groups) == groups
        assert all(v > 0 for v in r.rule_groups.values())
        assert r.dashboard_queries == len(queries())
        assert r.cpu["victoria-metrics"] > 0 and r.rss_mib["vmagent"] > 0
    text = table(results, cfg)
    assert text.count("\n| 2 | 16 | exporter |") == 1 and "| 3 | 24 | replay |" in text
    assert "100,000 GPUs" in text
