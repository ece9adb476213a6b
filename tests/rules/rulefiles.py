"""The rule files of alerts/ and their unit tests, loaded once for the tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import REPO

ALERTS_DIR = REPO / "alerts"
RULE_FILES = sorted(ALERTS_DIR.glob("*.rules.yml"))
UNIT_TEST_FILES = sorted((ALERTS_DIR / "tests").glob("*.test.yml"))
RUNBOOKS = REPO / "docs" / "runbooks.md"


@dataclass(frozen=True)
class Rule:
    file: Path
    group: str
    expr: str
    record: str | None = None
    alert: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    for_: str | None = None


def load_rules(files: list[Path] = RULE_FILES) -> list[Rule]:
    out = []
    for path in files:
        doc: dict[str, Any] = yaml.safe_load(path.read_text())
        for group in doc["groups"]:
            for r in group["rules"]:
                out.append(Rule(
                    file=path, group=group["name"], expr=str(r["expr"]),
                    record=r.get("record"), alert=r.get("alert"),
                    labels=dict(r.get("labels") or {}),
                    annotations=dict(r.get("annotations") or {}), for_=r.get("for"),
                ))
    return out


def recorded_names() -> set[str]:
    return {r.record for r in load_rules() if r.record}
