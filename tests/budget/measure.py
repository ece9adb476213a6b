"""Counts the series one GPU costs in storage: a real exporter on the fleet simulation's
node (eight busy H100s, one training process each in a Slurm job; tests/fleetsim/nodes.py)
scraped by a real Prometheus that evaluates every rule file of alerts/ (group intervals
lowered to 1 s, which changes no series count), and each rule pack's output counted by the
names it records."""

from __future__ import annotations

import re
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from gpu_exporter.model import catalogue as c
from tests.fake_nvml import scenario as fake
from tests.fleetsim import nodes
from tests.helpers import REPO, Series, eventually, exporter, parse
from tests.servers import QueryServer, prometheus, scrape_config

ALERTS = REPO / "alerts"
BUDGET = REPO / "spec" / "series-budget.yml"


def rule_packs() -> list[Path]:
    """Every rule file shipped: the default packs (alerts/*.yml) and the optional ones in
    folders below (alerts/dcgm/)."""
    return sorted(p for p in ALERTS.rglob("*.yml") if "tests" not in p.relative_to(ALERTS).parts)


def pack_name(path: Path) -> str:
    return str(path.relative_to(ALERTS))


def records(path: Path) -> set[str]:
    doc = yaml.safe_load(path.read_text())
    return {r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r}


def scope(s: Series) -> str:
    metric = c.BY_NAME.get(s.name) or c.BY_NAME.get(s.name.rsplit("_", 1)[0])
    return metric.scope.key if metric is not None else "unknown"


@dataclass
class Measured:
    gpus: int
    processes: int
    by_scope: dict[str, int]  # exporter series by catalogue scope
    scrape_series: int  # up, scrape_* written by the scraper per target
    rules: dict[str, int]  # rule pack -> recording-rule series
    by_family: dict[str, int]


def _fast_copy(path: Path, dest: Path) -> Path:
    text = re.sub(r"(?m)^(\s+interval:)\s*\S+$", r"\1 1s", path.read_text())
    out = dest / pack_name(path).replace("/", "-")
    out.write_text(text)
    return out


def _names(prom: QueryServer) -> dict[str, int]:
    return {r["metric"]["__name__"]: int(float(r["value"][1]))
            for r in prom.query('count by (__name__) ({__name__=~".+"})')}


def measure() -> Measured:
    packs = rule_packs()
    with tempfile.TemporaryDirectory(prefix="budget-") as tmp:
        root = Path(tmp)
        node = nodes.build(root / "node", 0, fake.build())
        (root / "rules").mkdir()
        copies = [_fast_copy(p, root / "rules") for p in packs]
        with exporter(node.args, env=node.env) as exp:
            exp.scrape()  # rates and per-process deltas need a previous scrape
            series = parse(exp.scrape())
            job = scrape_config("gpu-exporter", [f"127.0.0.1:{exp.port}"])
            with prometheus(scrape=[job], rule_files=copies) as prom:
                prom.wait_for('up{job="gpu-exporter"} == 1')
                started = time.time()

                def evaluated() -> bool:
                    groups = prom.get_json("/api/v1/rules")["data"]["groups"]
                    return bool(groups) and all(
                        _after(g["lastEvaluation"], started + 3)
                        for g in groups)

                eventually(evaluated, 60, "every rule group evaluated after 3 s of data",
                           interval=0.5)
                last: dict[str, dict[str, int]] = {"v": {}}

                def stable() -> dict[str, int]:
                    now = _names(prom)
                    prev, last["v"] = last["v"], now
                    return now if now == prev else {}

                names = eventually(stable, 60, "series counts stable", interval=2)
    by_pack = {pack_name(p): sum(names.get(n, 0) for n in records(p)) for p in packs}
    gpus = sum(1 for s in series if s.name == "hw_gpu_up")
    return Measured(
        gpus=gpus, processes=gpus, by_scope=dict(Counter(scope(s) for s in series)),
        scrape_series=sum(v for k, v in names.items() if k == "up" or k.startswith("scrape_")),
        rules=by_pack, by_family=dict(Counter(s.name for s in series)))


def _after(rfc3339: str, t: float) -> bool:
    """Prometheus' RFC 3339 time (nanoseconds, Z) is later than `t`."""
    whole, _, frac = rfc3339.rstrip("Z").partition(".")
    stamp = datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp()
    return stamp + float(f"0.{frac or 0}") > t


def load_budget() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(BUDGET.read_text())
    return doc


if __name__ == "__main__":
    m = measure()
    print(m.gpus, m.by_scope, m.scrape_series, m.rules)
