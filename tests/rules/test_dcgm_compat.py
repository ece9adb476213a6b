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
    renames,
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
        if f.name not in listed and not f.since:
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
    assert no == {"DCGM_FI_DRIVER_VERSION", "DCGM_FI_SYSTEM_DRIVER_VERSION"}, no
    # the last XID, under both of its names, from the exporter's last-XID family
    for name in ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR"):
        assert {f.name: f for f in FIELDS}[name].families == ("hw_gpu_xid_last_code",)


def test_every_name_of_4_9_and_4_10_is_in_the_table_with_its_release() -> None:
    rows = {f.name: f for f in FIELDS}
    recorded = renames()
    assert len(recorded) >= 40, recorded
    for r in recorded:
        f = rows[r["new"]]
        assert (f.since, f.replaces) == (r["release"], r["old"]), r
        if r["old"]:
            assert rows[r["old"]].renamed == r["release"] and not rows[r["old"]].since, r
            assert rows[r["old"]].default == f.default, r
        assert r["source"] in {"alias", "go-dcgm", "dcgm-4.7", "release-4.9.0",
                               "release-4.10.0"}, r
    assert {f.name for f in FIELDS if f.since} == {r["new"] for r in recorded}
    # NVIDIA's 4.9.0 release notes: 23 default fields (the driver label one of them)
    # renamed, eleven with a new unit, and the capacity collected by default
    renamed_defaults = [r for r in recorded if r["release"] == "4.9" and r["old"]
                        and rows[r["old"]].default]
    assert len(renamed_defaults) == 23, [r["old"] for r in renamed_defaults]
    assert sum(" -> " in r["unit"] for r in renamed_defaults) == 11
    assert rows["DCGM_FI_DEV_FB_CAPACITY_BYTES"].default
    # 4.10.0: four profiling fields, same unit
    assert sorted(r["new"] for r in recorded if r["release"] == "4.10") == sorted(
        f"DCGM_FI_PROF_{bus}_{d}X_BYTES_PER_SECOND" for bus in ("PCIE", "NVLINK")
        for d in "TR")


@pytest.mark.parametrize("release", gen.RELEASES)
def test_a_pack_for_one_release_records_its_names_only(tmp_path: Path, release: str) -> None:
    out = tmp_path / f"dcgm-{release}.rules.yml"
    assert gen.main(["--dcgm-exporter", release, "--out", str(out)]) == 0
    text = out.read_text()
    records = set(re.findall(r"(?m)^  - record: (\S+)$", text))
    want = {f.name for f in FIELDS if f.recreated and f.served_by(release)}
    assert records == want
    old = "DCGM_FI_DEV_GPU_TEMP" in records
    new = "DCGM_FI_DEV_GPU_TEMP_CELSIUS" in records
    assert (old, new) == ((True, False) if release == "4.8" else (False, True))
    assert ("DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND" in records) == (release == "4.10")
    assert ("DCGM_FI_PROF_PCIE_TX_BYTES" in records) == (release != "4.10")
    label = '"DCGM_FI_DRIVER_VERSION"' if release == "4.8" else '"DCGM_FI_SYSTEM_DRIVER_VERSION"'
    other = '"DCGM_FI_SYSTEM_DRIVER_VERSION"' if release == "4.8" else '"DCGM_FI_DRIVER_VERSION"'
    assert label in text and other not in text
    res = subprocess.run([require_tool("promtool"), "check", "rules", str(out)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_committed_pack_serves_every_generation() -> None:
    records = set(re.findall(r"(?m)^  - record: (\S+)$", PACK.read_text()))
    for release in gen.RELEASES:
        assert {f.name for f in FIELDS if f.recreated and f.served_by(release)} <= records


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


# -- the migration guide (docs/migrating-from-dcgm-exporter.md) ------------------------------
GUIDE = REPO / "docs" / "migrating-from-dcgm-exporter.md"
# a name of ours in the guide's text: not part of a path (gpu_exporter/…) or a longer word
OUR_NAME = re.compile(r"(?<![\w/.-])((?:hw|gpu|process|k8s)_[a-z0-9_]*[a-z0-9])(?![\w/])")


def _known_names() -> set[str]:
    """Every family of the catalogue, its histogram series, and every label a family or
    a device carries."""
    known = set(BY_NAME) | set(DEVICE_LABELS) | {"host_name"}
    for family in BY_NAME.values():
        known |= set(family.labels)
        known |= {f"{family.name}_{suffix}" for suffix in ("bucket", "sum", "count")}
    return known


def test_every_name_of_ours_the_guide_uses_is_in_the_catalogue() -> None:
    text = GUIDE.read_text()
    used = set(OUR_NAME.findall(text))
    assert {"hw_gpu_xid_last_code", "hw_gpu_xid_errors_total",
            "hw_gpu_utilization_ratio"} <= used, used  # the pattern finds them
    unknown = sorted(used - _known_names())
    assert not unknown, f"{GUIDE.name} names what the exporter does not serve: {unknown}"


def test_every_dcgm_name_the_guide_calls_recreated_is_a_record_of_the_pack() -> None:
    text = GUIDE.read_text()
    records = set(re.findall(r"(?m)^  - record: (\S+)$", PACK.read_text()))
    rows = re.findall(r"(?m)^\| `(DCGM_[A-Z0-9_]+)` \|(.*)\|$", text)
    assert len(rows) == len(FIELDS), len(rows)
    for name, rest in rows:
        said_no = "**not recreated**" in rest.rsplit("|", 1)[-1]
        assert said_no == (name not in records), name
    # and every DCGM name of the prose is one the table knows: recreated, or said why not
    table = {name for name, _ in rows}
    prose = re.sub(r"(?s)<!-- mapping: generated.*?<!-- end of mapping -->", "", text)
    names = {n.rstrip("_") for n in re.findall(r"DCGM_(?:FI|EXP)_[A-Z0-9_]+", prose)}
    # `…_BYTES_PER_SECOND` and `{TX,RX}` spellings stand for names the table lists
    names = {n for n in names if not n.endswith(("_PROF_PCIE", "_PROF_NVLINK"))}
    assert "DCGM_FI_DEV_XID_ERROR" in names and "DCGM_FI_DEV_GPU_UTIL_RATIO" in names
    assert names <= table, sorted(names - table)
    for name in ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR",
                 "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "DCGM_FI_DEV_FB_CAPACITY_BYTES",
                 "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND"):
        assert name in records, name


def test_the_guide_has_no_stale_promise() -> None:
    text = GUIDE.read_text()
    for stale in ("until the exporter serves", "once the awaited", "issue #22 adds",
                  "awaited families"):
        assert stale not in text, stale
    head = text[:text.index("## Labels")]
    for breaker in ("XID alerts", "Renamed names", "Units"):
        assert f"**{breaker}.**" in head, breaker
    assert "dcgmExporter.enabled=false" in text and "nvidia.com/gpu.deploy.dcgm-exporter" in text
