"""The dcgm-exporter compatibility pack (alerts/dcgm/): generated from one table that covers
dcgm-exporter's whole default counter list, valid for Prometheus and vmalert, and its unit
conversions and labels exactly dcgm-exporter's (promtool unit tests on synthetic series)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_exporter.model.catalogue import BY_NAME, DEVICE_LABELS
from tests.helpers import REPO, require_tool
from tests.rules.dcgm_compat import (
    AWAITING,
    PACK,
    SCRIPT,
    UNIT_TESTS,
    default_counters,
    generator,
)
from tests.rules.promql import metric_names

gen = generator()
FIELDS = gen.MAPPING


def test_the_table_covers_every_field_of_dcgm_exporters_default_list() -> None:
    listed = default_counters()
    assert len(listed) > 50 and sum(listed.values()) >= 25, listed  # the parser works
    rows = {f.name: f for f in FIELDS}
    assert len(rows) == len(FIELDS), "a field is in the table twice"
    assert set(listed) <= set(rows), f"not in the table: {sorted(set(listed) - set(rows))}"
    for name, enabled in listed.items():
        assert rows[name].default == enabled, name
        assert rows[name].listed == "default-counters.csv", name
    for f in FIELDS:
        if f.name not in listed:
            assert not f.default and f.listed != "default-counters.csv", f.name


def test_each_field_is_recreated_or_says_why() -> None:
    for f in FIELDS:
        assert bool(f.source) != bool(f.reason), f.name
        assert f.kind in {"gauge", "counter", "label"}, f.name
        if f.recreated:
            assert f.families and f.conversion, f.name
    recreated = {f.name for f in FIELDS if f.recreated}
    # What the issue names: profiling, PCIe bytes/s, NVLink bandwidth, framebuffer
    assert {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES",
            "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
            "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED",
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_VGPU_LICENSE_STATUS"} <= recreated
    no = {f.name for f in FIELDS if f.default and not f.recreated}
    assert no == {"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DRIVER_VERSION"}, no


def test_every_family_a_field_reads_is_the_exporters_or_awaited() -> None:
    for f in FIELDS:
        if not f.recreated:
            continue
        assert metric_names(f.source) == set(f.families), f.name
        for name in f.families:
            assert name in BY_NAME or name in AWAITING, f"{f.name}: no family {name}"


def test_awaited_families_are_not_in_the_catalogue_yet() -> None:
    """Once one is, remove it from tests/rules/dcgm_compat.AWAITING: the end-to-end test
    then demands its fields' data from the running exporter."""
    landed = sorted(AWAITING & set(BY_NAME))
    assert not landed, f"remove {landed} from tests/rules/dcgm_compat.AWAITING"


def test_our_labels_are_all_dropped() -> None:
    """A label of ours left on a recreated series would split it from dcgm-exporter's."""
    ours = set(DEVICE_LABELS) | {"host_name", *gen.FROM_INFO}
    for f in FIELDS:
        for name in f.families:
            if name in BY_NAME:
                ours |= set(BY_NAME[name].labels)
    assert ours <= set(gen.DROPPED), sorted(ours - set(gen.DROPPED))
    # and only dcgm-exporter's are made
    made = {dst for dst, _ in gen.RENAMED} | {"gpu", "UUID", "device", "GPU_I_ID",
                                              "GPU_I_PROFILE", gen.HOSTNAME_LABEL}
    assert not made & set(gen.DROPPED)


def test_the_committed_pack_and_doc_table_are_current() -> None:
    res = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def test_check_fails_on_a_stale_pack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / PACK.name
    stale.write_text(PACK.read_text().replace("record: DCGM_FI_DEV_GPU_TEMP\n", "", 1)
                     .replace('sensor="die"', 'sensor="edge"', 1))
    monkeypatch.setattr(gen, "PACK", stale)
    monkeypatch.setattr(gen, "REPO", tmp_path)
    assert gen.main(["--check"]) == 1


def test_the_pack_records_each_recreated_field_once() -> None:
    records = re.findall(r"(?m)^  - record: (\S+)$", PACK.read_text())
    assert records == [f.name for f in FIELDS if f.recreated]


def test_promtool_check_rules() -> None:
    res = subprocess.run([require_tool("promtool"), "check", "rules", str(PACK)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {sum(f.recreated for f in FIELDS)} rules found" in res.stdout


def test_vmalert_dry_run() -> None:
    res = subprocess.run([require_tool("vmalert"), "-dryRun", f"-rule={PACK}"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_promtool_unit_tests_units_and_labels() -> None:
    res = subprocess.run([require_tool("promtool"), "test", "rules", UNIT_TESTS.name],
                         cwd=UNIT_TESTS.parent, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_pack_for_older_releases_writes_Hostname(tmp_path: Path) -> None:
    """dcgm-exporter up to 4.5.3-4.8.2 wrote `Hostname`: the pack the script writes with
    --hostname-label Hostname passes the same unit tests with that label instead."""
    (tmp_path / "tests").mkdir()
    res = subprocess.run([sys.executable, str(SCRIPT), "--hostname-label", "Hostname",
                          "--out", str(tmp_path / PACK.name)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    text = UNIT_TESTS.read_text()
    assert text.count('hostname="node1"') > 30
    (tmp_path / "tests" / UNIT_TESTS.name).write_text(
        text.replace('hostname="node1"', 'Hostname="node1"'))
    res = subprocess.run([require_tool("promtool"), "test", "rules", UNIT_TESTS.name],
                         cwd=tmp_path / "tests", capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    # and the committed pack does not pass them: the label is really what differs
    shutil.copy(PACK, tmp_path / PACK.name)
    res = subprocess.run([require_tool("promtool"), "test", "rules", UNIT_TESTS.name],
                         cwd=tmp_path / "tests", capture_output=True, text=True, timeout=120)
    assert res.returncode != 0, res.stdout


def test_the_pack_is_not_part_of_the_default_rule_pack() -> None:
    """Loaded beside a running dcgm-exporter it would double every sum(): it stays out of
    alerts/*.yml, which Prometheus, vmalert and the Kubernetes objects load."""
    for path in (REPO / "deploy").rglob("*"):
        if path.is_file() and path.suffix in {".yaml", ".yml", ".json"}:
            assert "DCGM_FI_" not in path.read_text(errors="replace"), path
    assert PACK.parent != REPO / "alerts"
    # the globs the shipped configurations load alerts/ with (compose, demo, README)
    for pattern in ("alerts/*.yml", "alerts/*.rules.yml"):
        assert PACK not in set(REPO.glob(pattern)), pattern
    compose = (REPO / "deploy" / "compose").rglob("*.y*ml")
    assert all("dcgm" not in p.read_text() for p in compose)


def test_the_catalogues_dcgm_notes_agree_with_the_table() -> None:
    """A family's `dcgm` note (docs/metrics.md) names the fields it equals: the table
    makes each of those that it recreates from that family."""
    rows = {f.name: f for f in FIELDS if f.recreated}
    checked = 0
    for family in BY_NAME.values():
        for name in re.findall(r"DCGM_(?:FI|EXP)_[A-Z0-9_]+", family.dcgm):
            if name in rows:
                assert family.name in rows[name].families, (family.name, name)
                checked += 1
    assert checked >= 10, checked
