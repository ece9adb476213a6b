"""The dashboards of dashboards/ and their panel queries, for the tests."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers import REPO

DASHBOARD_DIR = REPO / "dashboards"
DASHBOARD_FILES = sorted(DASHBOARD_DIR.glob("*.json"))

# What Grafana puts in place of its variables when everything is selected ("All" is ".*";
# for $job, which has no custom "All", the jobs its query finds: the e2e stack scrapes one,
# tests/e2e/conftest.JOB) and the dashboard shows the last hour.
DEFAULT_VARIABLES = {
    "host": ".*", "team": ".*", "gpu": ".*", "job": "gpu-exporter",
    "__rate_interval": "1m", "__range": "1h", "__interval": "15s",
}


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    unit: str
    expr: str

    @property
    def id(self) -> str:
        return f"{self.dashboard}:{self.panel}"


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in doc["panels"]:
        if p["type"] == "row":
            out.extend(p.get("panels", []))
        else:
            out.append(p)
    return out


def queries(files: list[Path] = DASHBOARD_FILES) -> list[PanelQuery]:
    out = []
    for path in files:
        doc = load(path)
        for p in panels(doc):
            for t in p.get("targets", []):
                out.append(PanelQuery(path.stem, p["title"],
                                      p["fieldConfig"]["defaults"].get("unit", ""), t["expr"]))
    return out


def substitute(expr: str, values: dict[str, str] | None = None) -> str:
    """Replace $var and ${var} as Grafana does."""
    vals = {**DEFAULT_VARIABLES, **(values or {})}

    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        assert name in vals, f"unknown dashboard variable ${name} in {expr!r}"
        return vals[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, expr)
