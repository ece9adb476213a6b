"""The catalogue against the metric contract (`spec/metrics.md`, kept in the repository)
and Prometheus naming rules."""

from __future__ import annotations

import re
import subprocess
import sys
import typing
from dataclasses import dataclass
from pathlib import Path

from gpu_exporter.model import catalogue as c
from gpu_exporter.model import records
from tests.helpers import REPO

SPEC = REPO / "spec" / "metrics.md"
# the generator of docs/metrics.md, a build tool outside the package (`make docs`)
GENERATOR = REPO / "scripts" / "gen-metrics-doc.py"

_NAME = r"[a-z_][a-z0-9_]*"  # k8s_… names have a digit
_ROW = re.compile(
    rf"^\|\s*`(?P<a>{_NAME})`(?:\s*/\s*`(?P<b>{_NAME})`)?(?P<marks>(?:\s*\*\*\w+\*\*)*)"
    r"\s*\|\s*(?P<kind>\w+)"
)
_LISTED = re.compile(
    rf"`(?P<name>{_NAME})(?:\{{[^`]*\}})?`(?P<planned>\s*\(\*\*planned\*\*\))?")


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # gauge, counter, histogram; "" for families only listed by name
    fixed: bool
    planned: bool


def spec_families(text: str) -> dict[str, Family]:
    """Every family the contract names: the rows of its tables and the names listed in its
    host and self-metric sections, with their marks."""
    out: dict[str, Family] = {}
    for line in text.splitlines():
        m = _ROW.match(line)
        if m and m.group("kind") in ("gauge", "counter", "histogram"):
            marks = m.group("marks")
            for name in (m.group("a"), m.group("b")):
                if name:
                    # A family in two tables (hw_errors_total: its NVLink/PCIe values)
                    # is fixed if a row marks it, planned only if every row does.
                    seen = out.get(name)
                    out[name] = Family(
                        name, m.group("kind"),
                        "**fixed**" in marks or (seen is not None and seen.fixed),
                        "**planned**" in marks and (seen is None or seen.planned))
    for section in ("## Host families", "## Exporter self-metrics"):
        block = text.split(section)[1].split("\n## ")[0]
        for m in _LISTED.finditer(block):
            name = m.group("name")
            if name.startswith(("system_", "gpu_exporter_")) and name not in out:
                out[name] = Family(name, "", False, m.group("planned") is not None)
    return out


def planned_label_values(text: str, label: str) -> set[str]:
    """Values of `label` the contract marks planned, e.g. `error_type` = … (**planned**
    values): the values listed in a cell whose text ends with that mark."""
    out: set[str] = set()
    for m in re.finditer(rf"`{label}` =([^\n]*?)\(\*\*planned\*\* values\)", text):
        out.update(re.findall(r"`([a-z_]+)`", m.group(1)))
    return out


def planned_process_labels(text: str) -> set[str]:
    block = text.split("Process labels:")[1].split("\n\n")[0]
    return set(re.findall(r"`([a-z_]+)` \(\*\*planned\*\*\)", block))


SPEC_TEXT = SPEC.read_text()
FAMILIES = spec_families(SPEC_TEXT)


def test_the_contract_lives_in_the_repository() -> None:
    assert SPEC.is_file(), f"the metric contract is missing at {SPEC}"
    assert SPEC.resolve().is_relative_to(REPO.resolve())


def test_the_contract_parser_sees_every_table_and_mark() -> None:
    # So that a change of the contract's layout cannot make the checks below vacuous.
    assert len([f for f in FAMILIES.values() if f.kind]) >= 35, FAMILIES
    # every family row whose name cell carries the mark, and every listed name with it
    rows = [line for line in SPEC_TEXT.splitlines()
            if line.startswith("| `") and "**planned**" in line.split("|")[1]]
    listed = SPEC_TEXT.split("## Exporter self-metrics")[1].count("(**planned**)")
    assert len([f for f in FAMILIES.values() if f.planned]) >= len(rows) + listed
    assert len([f for f in FAMILIES.values() if f.fixed]) >= 8
    assert {"system_cpu_utilization_ratio", "gpu_exporter_build_info"} <= FAMILIES.keys()


def test_every_built_family_of_the_contract_is_in_the_catalogue_with_its_type() -> None:
    for f in FAMILIES.values():
        if f.planned:
            continue
        assert f.name in c.BY_NAME, f"{f.name} from the contract is not in the catalogue"
        if f.kind:
            assert c.BY_NAME[f.name].kind.value == f.kind, (f.name, f.kind)


def test_planned_families_are_not_in_the_catalogue_yet() -> None:
    # Implementing one means removing its **planned** mark from spec/metrics.md too.
    for f in FAMILIES.values():
        if f.planned:
            assert f.name not in c.BY_NAME, (
                f"{f.name} is in the catalogue: remove its **planned** mark from the contract")


def test_planned_label_values_are_not_emitted_yet() -> None:
    # the parser finds marked values (the contract may have none left)
    assert planned_label_values(
        "`error_type` = `a` \\| `b` (**planned** values)", "error_type") == {"a", "b"}
    planned = planned_label_values(SPEC_TEXT, "error_type")
    built = set(typing.get_args(records.ErrorType))
    assert not planned & built, (
        f"{sorted(planned & built)} are built: remove their **planned** mark from the contract")


def test_planned_process_labels_are_not_emitted_yet() -> None:
    # The parser reads the contract's list (it names slurm_job_id, built: not planned).
    assert "slurm_job_id" in SPEC_TEXT.split("Process labels:")[1].split("\n\n")[0]
    assert "slurm_job_id" not in planned_process_labels(SPEC_TEXT)
    planned = planned_process_labels(SPEC_TEXT)
    assert not planned & set(c.PROCESS_LABELS), planned & set(c.PROCESS_LABELS)


def test_fixed_names_of_the_contract_are_marked_fixed() -> None:
    fixed = sorted(f.name for f in FAMILIES.values() if f.fixed)
    # and no family is fixed in the catalogue that the contract does not mark
    assert fixed == sorted(f.name for f in c.CATALOGUE if f.fixed and f.name in FAMILIES)


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
    res = subprocess.run([sys.executable, str(GENERATOR)], capture_output=True, text=True,
                         timeout=60, check=True)
    assert doc == res.stdout, "docs/metrics.md is stale: run `make docs`"
