"""What each GPU needs, as the driver says it: NVML's recovery action (exactly one
`action` is 1; a value nvml.h does not name is `unknown`), row remapping, retired pages,
the driver's memory reservation, and every XID code with its Xid Catalog action. A field
the driver does not give is absent (never 0) and says why in its feature state."""

from __future__ import annotations

import csv
from pathlib import Path

import pynvml
import pytest

from gpu_exporter.model import xid_catalog
from gpu_exporter.sources.nvml import devices, values
from tests.bench.floor import recording_nvml
from tests.fake_nvml import scenario as fake
from tests.helpers import find, parse, value
from tests.nvidia.conftest import running
from tests.nvidia.test_failures import uuid
from tests.nvidia.test_features import doctor, states

CATALOG = Path(xid_catalog.__file__).with_name("xid_catalog.csv")
RECOVERY = pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
REMAP_FIELDS = (pynvml.NVML_FI_DEV_REMAPPED_COR, pynvml.NVML_FI_DEV_REMAPPED_UNC,
                pynvml.NVML_FI_DEV_REMAPPED_PENDING, pynvml.NVML_FI_DEV_REMAPPED_FAILURE)
# nvml.h nvmlDeviceGpuRecoveryAction_t, written out here as the exporter hard-codes it
NVML_H = ["none", "gpu_reset", "node_reboot", "drain_p2p", "drain_and_reset",
          "recover_imex_domain", "bus_reset", "system_reboot"]


# -- the Xid Catalog table ------------------------------------------------------------------
def test_every_row_of_the_xid_catalog_parses_with_its_buckets() -> None:
    text = CATALOG.read_text()
    assert "docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html" in text
    raw = list(csv.DictReader(x for x in text.splitlines() if not x.startswith("#")))
    table = xid_catalog.table()
    assert len(table) == len(raw) and sorted(table) == list(range(1, 173))
    for row in raw:
        entry = table[int(row["xid"])]
        assert entry.mnemonic == row["mnemonic"] and entry.mnemonic
        assert entry.immediate == row["immediate"]
        assert entry.investigatory == row["investigatory"]
        assert entry.action == (row["immediate"].lower() or "unknown")
    # Every code the catalog marks for A100, H100, B100 or GB200 is in the table.
    applies = {x for x, e in table.items() if e.applies_to}
    assert {8, 13, 31, 48, 63, 64, 74, 79, 94, 95, 119, 120, 140, 144, 154} <= applies
    assert table[121].applies_to == {"gb200"} and table[93].applies_to == {"a100"}


@pytest.mark.parametrize("xid, action", [
    (13, "restart_app"), (31, "restart_app"), (94, "restart_app"),  # 94: not a drain
    (48, "workflow_xid_48"), (79, "restart_bm"), (95, "reset_gpu"), (54, "check_mechanicals"),
    (78, "update_swfw"), (151, "restart_vm"), (154, "xid_154"), (145, "workflow_nvlink5_err"),
    (63, "ignore"), (1, "contact_support"),
])
def test_codes_take_the_catalogs_immediate_bucket(xid: int, action: str) -> None:
    assert xid_catalog.action(xid) == action


@pytest.mark.parametrize("xid", [0, -1, 173, 999, 2**31])
def test_a_code_the_catalog_lacks_is_unknown(xid: int) -> None:
    assert xid_catalog.action(xid) == "unknown"


def test_a_code_without_a_published_bucket_is_unknown() -> None:
    assert xid_catalog.table()[171].mnemonic == "UNCORRECTABLE_DRAM_ERROR"
    assert xid_catalog.action(171) == "unknown"


@pytest.mark.parametrize("bad", [
    "xid,mnemonic,description,a100,h100,b100,gb200,immediate,investigatory,xid154_linkage\n"
    "13,X,d,MAYBE,NO,NO,NO,RESTART_APP,,\n",
    "xid,mnemonic,description,a100,h100,b100,gb200,immediate,investigatory,xid154_linkage\n"
    "x13,X,d,NO,NO,NO,NO,RESTART_APP,,\n",
    "xid,mnemonic\n13,X\n",
])
def test_a_malformed_catalog_row_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        xid_catalog.parse(bad.splitlines())


# -- the driver's verdict and memory repair, end to end -----------------------------------
def test_recovery_action_row_remapping_and_reserved_memory_per_gpu(
    fake_lib: Path, tmp_path: Path
) -> None:
    sc = fake.h100x8()
    for i, d in enumerate(sc.devices):
        d.values["recovery_action"] = i  # 0..7: every value nvml.h names
    sc.devices[4].values.update(remapped_rows_uncorrected=2, remapped_rows_pending=1)
    sc.devices[5].values["remapped_rows_failure"] = 1
    with running(fake_lib, sc, tmp_path) as exp:
        s = parse(exp.scrape())
    for i in range(8):
        dev = {"hw_id": uuid(i)}
        on = [x.labels["action"] for x in find(s, "hw_gpu_recovery_action", **dev)
              if x.value == 1]
        assert on == [NVML_H[i]]
        # Only the action the driver gives: the eight others are not written as 0.
        assert len(find(s, "hw_gpu_recovery_action", **dev)) == 1
        assert value(s, "hw_gpu_memory_remapped_rows_total", error_type="corrected",
                     **dev) == i
        assert value(s, "hw_gpu_memory_reserved_bytes", **dev) == 512 * fake.MIB
    assert value(s, "hw_gpu_memory_remapped_rows_total", hw_id=uuid(4),
                 error_type="uncorrected") == 2
    assert value(s, "hw_gpu_memory_row_remap_pending", hw_id=uuid(4)) == 1
    assert value(s, "hw_gpu_memory_row_remap_pending", hw_id=uuid(5)) == 0
    assert value(s, "hw_gpu_memory_row_remap_failure", hw_id=uuid(5)) == 1
    assert value(s, "hw_status", hw_id=uuid(5), hw_state="failed") == 1
    # The driver's verdict sets the health state: a reset or a reboot needed is failed.
    for i in (1, 2, 6, 7):  # gpu_reset, node_reboot, bus_reset, system_reboot
        assert value(s, "hw_status", hw_id=uuid(i), hw_state="failed") == 1, i
    assert value(s, "hw_status", hw_id=uuid(0), hw_state="ok") == 1
    # An H100 retires no pages (row remapping replaced it): absent, not 0.
    assert not find(s, "hw_gpu_memory_retired_pages_total")
    assert states(s, "nvidia.recovery_action") == {None: "enabled"}


def test_a_recovery_action_nvml_h_does_not_name_is_unknown(
    fake_lib: Path, tmp_path: Path
) -> None:
    sc = fake.h100x8()
    sc.devices = sc.devices[:3]
    sc.devices[1].values["recovery_action"] = 42
    sc.devices[2].values.update(recovery_action=3, clocks_event_reasons=0)  # drain_p2p
    with running(fake_lib, sc, tmp_path) as exp:
        s = parse(exp.scrape())
    on = {x.labels["action"] for x in find(s, "hw_gpu_recovery_action", hw_id=uuid(1))
          if x.value == 1}
    assert on == {"unknown"}
    assert value(s, "hw_gpu_recovery_action", hw_id=uuid(0), action="none") == 1
    assert value(s, "hw_status", hw_id=uuid(0), hw_state="ok") == 1
    assert value(s, "hw_status", hw_id=uuid(2), hw_state="degraded") == 1
    assert value(s, "hw_gpu_power_draw_watts", hw_id=uuid(1)) > 0
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1


def test_without_the_recovery_field_no_series_and_the_feature_says_why(
    fake_lib: Path, tmp_path: Path
) -> None:
    sc = fake.h100x8()
    sc.devices = sc.devices[:2]
    for d in sc.devices:
        d.field_errors[RECOVERY] = "NOT_SUPPORTED"  # a driver before R570
        for fid in REMAP_FIELDS:
            d.field_errors[fid] = "NOT_SUPPORTED"
        for key in ("remapped_rows_corrected", "remapped_rows_uncorrected",
                    "remapped_rows_pending", "remapped_rows_failure"):
            del d.values[key]  # nor does nvmlDeviceGetRemappedRows give them
    with running(fake_lib, sc, tmp_path) as exp:
        s = parse(exp.scrape())
        feature = [x for x in find(s, "gpu_exporter_feature_status",
                                   feature="nvidia.recovery_action") if x.value == 1]
    assert not find(s, "hw_gpu_recovery_action")
    assert not find(s, "hw_gpu_memory_remapped_rows_total")
    assert not find(s, "hw_gpu_memory_row_remap_pending")
    assert [x.labels["state"] for x in feature] == ["unavailable"]
    assert len(find(s, "hw_gpu_power_draw_watts")) == 2
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1


def test_row_remapping_the_batch_cannot_give_comes_from_nvml_get_remapped_rows(
    tmp_path: Path
) -> None:
    sc = fake.h100x8()
    sc.devices = sc.devices[:1]
    d = sc.devices[0]
    d.values.update(remapped_rows_corrected=7, remapped_rows_uncorrected=1,
                    remapped_rows_pending=1)
    for fid in REMAP_FIELDS:
        d.field_errors[fid] = "NOT_SUPPORTED"
    fake.load_in_process(sc.write(tmp_path / "one.scenario"))
    pynvml.nvmlInit()
    try:
        gpu = devices.discover(0, None, None, {})
        with recording_nvml() as rec:
            reading = values.read(gpu).readings[0]
    finally:
        pynvml.nvmlShutdown()
    assert reading.remapped_rows == {"corrected": 7, "uncorrected": 1}
    assert reading.row_remap_pending is True and reading.row_remap_failure is False
    assert rec.by_function()["nvmlDeviceGetRemappedRows"] == 4


def test_retired_pages_of_an_older_gpu(tmp_path: Path) -> None:
    sc = fake.h100x8()
    sc.devices = sc.devices[:1]
    d = sc.devices[0]
    d.values.update(retired_pages_corrected=3, retired_pages_uncorrected=1,
                    retired_pages_pending=1)
    fake.load_in_process(sc.write(tmp_path / "one.scenario"))
    pynvml.nvmlInit()
    try:
        reading = values.read(devices.discover(0, None, None, {})).readings[0]
    finally:
        pynvml.nvmlShutdown()
    assert reading.retired_pages == {"corrected": 3, "uncorrected": 1}
    assert reading.retired_pages_pending is True
    assert reading.state == "degraded"


# -- the vGPU licence: a guest's only ---------------------------------------------------------
def test_a_vgpu_guest_reports_its_licence_and_bare_metal_does_not(
    fake_lib: Path, tmp_path: Path
) -> None:
    sc = fake.h100x8()
    sc.devices = sc.devices[:3]
    sc.devices[0].values.update(virtualization_mode=2, vgpu_licensed=1)  # licensed guest
    sc.devices[1].values.update(virtualization_mode=2, vgpu_licensed=0)  # unlicensed guest
    sc.devices[2].values.update(virtualization_mode=0, vgpu_licensed=1)  # bare metal
    with running(fake_lib, sc, tmp_path) as exp:
        s = parse(exp.scrape())
    assert value(s, "hw_gpu_vgpu_license_state", hw_id=uuid(0), state="licensed") == 1
    assert value(s, "hw_gpu_vgpu_license_state", hw_id=uuid(0), state="unlicensed") == 0
    assert value(s, "hw_gpu_vgpu_license_state", hw_id=uuid(1), state="unlicensed") == 1
    assert not find(s, "hw_gpu_vgpu_license_state", hw_id=uuid(2))
    assert states(s, "nvidia.vgpu_license") == {
        uuid(0): "enabled", uuid(1): "enabled", uuid(2): "disabled"}


def test_the_licence_is_asked_for_only_on_a_vgpu_guest(tmp_path: Path) -> None:
    sc = fake.h100x8()
    sc.devices = sc.devices[:2]
    sc.devices[0].values.update(virtualization_mode=2, vgpu_licensed=1)
    sc.devices[1].values.update(vgpu_licensed=1)  # no virtualization mode: bare metal
    fake.load_in_process(sc.write(tmp_path / "two.scenario"))
    pynvml.nvmlInit()
    try:
        guest, metal = (devices.discover(i, None, None, {}) for i in range(2))
        with recording_nvml() as rec:
            values.read(metal)
        with recording_nvml() as guest_rec:
            reading = values.read(guest).readings[0]
    finally:
        pynvml.nvmlShutdown()
    assert "nvmlDeviceGetGridLicensableFeatures" not in rec.by_function()
    assert guest_rec.by_function()["nvmlDeviceGetGridLicensableFeatures"] == 1
    assert reading.vgpu_license_state == "licensed"
    assert metal.vgpu_license is not None and metal.vgpu_license.state == "disabled"


# -- doctor: per GPU, the action needed and why ---------------------------------------------
def test_doctor_prints_per_gpu_the_action_needed_and_why(
    fake_lib: Path, tmp_path: Path
) -> None:
    sc = fake.h100x8()
    sc.devices[1].values["recovery_action"] = 2  # node_reboot
    sc.devices[4].values["remapped_rows_pending"] = 1
    sc.devices[5].values["remapped_rows_failure"] = 1
    sc.devices[6].values["recovery_action"] = 4  # drain_and_reset
    lines = doctor(fake_lib, sc, tmp_path)
    at = lines.index("GPUs: what each needs now")
    rows = {line.split()[1]: line for line in lines[at + 1:at + 9]}
    assert rows["0"].endswith(f"{uuid(0)}  none")
    assert "reboot the node: the driver's recovery action is node_reboot" in rows["1"]
    assert "reset the GPU: a memory row remap is pending until the next reset" in rows["4"]
    assert "replace the GPU: a memory row could not be remapped" in rows["5"]
    assert "health state" not in rows["5"]  # the remap failure says it all
    assert "investigate: its health state is failed" in rows["3"]  # GPU 3: an ECC error
    assert "reset the GPU: the driver's recovery action is drain_and_reset" in rows["6"]
    assert "0000:9a:00.0" in rows["4"]
