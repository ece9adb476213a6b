"""The catalogue against the metric contract and Prometheus naming rules."""

from __future__ import annotations

import re
from pathlib import Path

from gpu_exporter import catalogue as c
from gpu_exporter.docs import render
from tests.helpers import REPO

SPEC = REPO.parent / "shared" / "spec" / "metrics.md"


def _spec_tables() -> dict[str, str]:
    """name -> type for every row of the spec's family tables."""
    out: dict[str, str] = {}
    for line in SPEC.read_text().splitlines():
        m = re.match(r"\|\s*`([a-z_]+)`(?:\s*/\s*`([a-z_]+)`)?(?:\s*\*\*fixed\*\*)?\s*\|\s*(\w+)",
                     line)
        if m and m.group(3) in ("gauge", "counter", "histogram"):
            for name in (m.group(1), m.group(2)):
                if name:
                    out[name] = m.group(3)
    return out


def test_spec_is_where_ci_puts_it() -> None:
    assert SPEC.is_file(), f"the metric contract is missing at {SPEC}"


def test_every_spec_family_is_in_the_catalogue_with_its_type() -> None:
    table = _spec_tables()
    assert len(table) >= 25, table
    for name, kind in table.items():
        assert name in c.BY_NAME, f"{name} from the spec is not in the catalogue"
        assert c.BY_NAME[name].kind.value == kind, (name, kind)


def test_fixed_names_of_the_spec_are_marked_fixed() -> None:
    fixed = re.findall(r"`([a-z_]+)` \*\*fixed\*\*", SPEC.read_text())
    assert fixed
    for name in fixed:
        assert c.BY_NAME[name].fixed, name


def test_named_lists_of_the_spec_are_in_the_catalogue() -> None:
    text = SPEC.read_text()
    host = text.split("## Host families")[1].split("##")[0]
    selfm = text.split("## Exporter self-metrics")[1].split("##")[0]
    for block in (host, selfm):
        for name in re.findall(r"`([a-z_]+)(?:\{[^`]*\})?`", block):
            if name.startswith(("system_", "gpu_exporter_")):
                assert name in c.BY_NAME, name


def test_prometheus_naming_rules() -> None:
    names = [m.name for m in c.CATALOGUE]
    assert len(names) == len(set(names))
    for m in c.CATALOGUE:
        assert re.fullmatch(r"[a-z_][a-z0-9_]*", m.name), m.name
        assert (m.kind is c.Kind.COUNTER) == m.name.endswith("_total"), m.name
        if m.unit:
            assert m.family_name.endswith("_" + m.unit), m.name
        assert m.help.endswith("."), m.name


def test_generated_reference_is_fresh() -> None:
    doc = Path(REPO / "docs" / "metrics.md").read_text()
    assert doc == render(), "docs/metrics.md is stale: run `make docs`"
