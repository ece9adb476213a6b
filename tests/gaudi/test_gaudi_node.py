"""A Gaudi node through the whole exporter: the real habana-pyhlml over the fake HLML
(loaded by path through --gaudi.hlml-library), a sysfs tree with Gaudi PCI functions.
Every family with its exact value in base units; a Gaudi HLML does not list, a hung call
and a missing library."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpu_exporter.sources.hlml.session import binding
from tests.fake_hlml import scenario as fake
from tests.gaudi.conftest import ADDRESSES, dump, gaudi_flags, only, two_gaudis
from tests.helpers import find, promtool_check_metrics, run_cli, value
from tests.sysfs.tree import FakeSysfs


def test_every_family_in_base_units(hlml_lib: Path, sysfs: FakeSysfs, procfs: Path,
                                    tmp_path: Path) -> None:
    sc = two_gaudis(sysfs)
    text, s = dump(gaudi_flags(hlml_lib, sysfs, procfs), sc.write(tmp_path / "hlml"))
    promtool_check_metrics(text)
    d = sc.devices[1]
    dev = {"hw_id": d.uuid}
    assert value(s, "hw_gpu_up", **dev) == 1
    labels = find(s, "hw_gpu_up", **dev)[0].labels
    assert labels["hw_vendor"] == "habana" and labels["gpu_index"] == "1"
    assert labels["gpu_pci_address"] == ADDRESSES[1] and labels["hw_name"] == "HL-225"
    info = find(s, "hw_gpu_info", **dev)[0].labels
    assert (info["hw_serial_number"], info["hw_driver_version"], info["hw_model"]) == (
        "AN51000001", "1.21.1-a7d8b71", "Gaudi2 AI Training Accelerator")
    assert value(s, "hw_gpu_utilization_ratio", hw_gpu_task="general", **dev) == 0.41
    assert value(s, "hw_gpu_memory_usage_bytes", **dev) == 12 * fake.GIB + 1
    assert value(s, "hw_gpu_memory_limit_bytes", **dev) == 96 * fake.GIB
    assert value(s, "hw_gpu_power_draw_watts", **dev) == pytest.approx(350.501)  # mW
    # The enforced limit; a binding without hlmlDeviceGetPowerManagementLimit (before
    # 1.2x): the default limit.
    limit = 600.0 if hasattr(binding(), "hlmlDeviceGetPowerManagementLimit") else 550.0
    assert value(s, "hw_gpu_power_limit_watts", **dev) == limit
    assert value(s, "hw_gpu_energy_consumed_joules_total", **dev) == pytest.approx(
        7_200_000.124)  # mJ
    temps = {x.labels["sensor"]: x.value for x in find(s, "hw_gpu_temperature_celsius", **dev)}
    assert temps == {"die": 42.0, "board": 33.0, "memory": 45.0}  # no VRM sensor: absent
    assert value(s, "hw_gpu_clock_hertz", hw_gpu_clock_domain="soc", **dev) == 1.6e9
    errors = {x.labels["error_type"]: x.value for x in find(s, "hw_errors_total", **dev)}
    assert errors == {"corrected": 1, "uncorrected": 0, "pcie_replay": 7}  # volatile ECC
    rows = {x.labels["error_type"]: x.value
            for x in find(s, "hw_gpu_memory_remapped_rows_total", **dev)}
    assert rows == {"corrected": 2, "uncorrected": 1}
    assert value(s, "hw_gpu_memory_row_remap_pending", **dev) == 0
    assert value(s, "hw_gpu_clock_throttle_active", reason="thermal", **dev) == 0
    assert value(s, "hw_status", hw_state="ok", **dev) == 1
    assert value(s, "hw_gpu_pcie_current_link_width", **dev) == 16  # sysfs, as every vendor
    # 24 ports, 1, 8 and 22 external (scale-out), port 3 down
    nics = {(x.labels["nic_scope"], x.labels["nic_link_state"]): x.value
            for x in find(s, "hw_gpu_nic_links", **dev)}
    assert nics == {("external", "up"): 3, ("external", "down"): 0,
                    ("internal", "up"): 20, ("internal", "down"): 1}
    assert value(s, "gpu_exporter_collector_success", collector="gaudi") == 1
    assert value(s, "gpu_exporter_feature_status", feature="gaudi.hlml", state="enabled") == 1


def test_unsupported_values_are_absent_not_zero(hlml_lib: Path, sysfs: FakeSysfs,
                                                procfs: Path, tmp_path: Path) -> None:
    sc = two_gaudis(sysfs)
    for key in ("power_mw", "energy_mj", "util_aip", "pcie_replay", "ecc_1_0", "temp_3"):
        del sc.devices[0].values[key]
    sc.devices[0].nics = []  # a card without NICs (HLML: NOT_SUPPORTED)
    sc.devices[0].errors["hlml_device_get_memory_info"] = "NOT_SUPPORTED"
    _, s = dump(gaudi_flags(hlml_lib, sysfs, procfs), sc.write(tmp_path / "hlml"))
    dev = {"hw_id": sc.devices[0].uuid}
    assert value(s, "hw_gpu_up", **dev) == 1
    for name in ("hw_gpu_power_draw_watts", "hw_gpu_energy_consumed_joules_total",
                 "hw_gpu_utilization_ratio", "hw_gpu_memory_usage_bytes",
                 "hw_gpu_memory_limit_bytes", "hw_gpu_nic_links"):
        assert find(s, name, **dev) == [], name
    assert {x.labels["error_type"] for x in find(s, "hw_errors_total", **dev)} == {"corrected"}
    assert {x.labels["sensor"] for x in find(s, "hw_gpu_temperature_celsius", **dev)} == {
        "die", "board"}
    assert value(s, "gpu_exporter_collector_success", collector="gaudi") == 1  # not a failure


def test_a_gaudi_hlml_does_not_list_reads_up_0_failed(hlml_lib: Path, sysfs: FakeSysfs,
                                                       procfs: Path, tmp_path: Path) -> None:
    sc = two_gaudis(sysfs)
    sc.devices[1].listed = False
    _, s = dump(gaudi_flags(hlml_lib, sysfs, procfs), sc.write(tmp_path / "hlml"))
    assert value(s, "hw_gpu_up", hw_id=sc.devices[0].uuid) == 1
    down = find(s, "hw_gpu_up", gpu_pci_address=ADDRESSES[1])
    assert [x.value for x in down] == [0.0] and "hw_id" not in down[0].labels
    assert down[0].labels["gpu_index"] == "1"
    assert value(s, "hw_status", hw_state="failed", gpu_pci_address=ADDRESSES[1]) == 1
    assert value(s, "gpu_exporter_feature_status", feature="gaudi.device",
                 state="unavailable") == 1


def test_a_hung_hlml_call_costs_only_its_device(hlml_lib: Path, sysfs: FakeSysfs,
                                                procfs: Path, tmp_path: Path) -> None:
    sc = two_gaudis(sysfs)
    sc.devices[1].hangs["hlml_device_get_power_usage"] = 20.0
    started = time.monotonic()
    _text, s = dump([*gaudi_flags(hlml_lib, sysfs, procfs), "--scrape.timeout=2"],
                   sc.write(tmp_path / "hlml"))
    assert time.monotonic() - started < 15  # not the 20 s the call hangs
    assert value(s, "hw_gpu_up", hw_id=sc.devices[0].uuid) == 1
    assert value(s, "hw_gpu_power_draw_watts", hw_id=sc.devices[0].uuid) == 350.5
    assert [x.value for x in find(s, "hw_gpu_up", gpu_pci_address=ADDRESSES[1])] == [0.0]
    assert value(s, "gpu_exporter_collector_success", collector="gaudi") == 0


def test_without_the_library_the_rest_runs_and_the_fix_is_said(
        sysfs: FakeSysfs, procfs: Path, tmp_path: Path) -> None:
    sc = two_gaudis(sysfs)
    sysfs.add("rx6900xt", "0000:0c:00.0", 0)  # an AMD card beside: still read
    missing = tmp_path / "nowhere" / "libhlml.so"
    args = [*only("gaudi", "amd"), f"--gaudi.hlml-library={missing}",
            f"--path.sysfs={sysfs.root}", f"--path.procfs={procfs}"]
    text, s = dump(args, sc.write(tmp_path / "hlml"))
    promtool_check_metrics(text)  # nothing of the binding's on stdout
    assert "Failed to load" not in text
    assert value(s, "gpu_exporter_feature_status", feature="gaudi.hlml",
                 state="unavailable") == 1
    assert [x.value for x in find(s, "hw_gpu_up", hw_vendor="habana")] == [0.0, 0.0]
    assert value(s, "hw_gpu_up", hw_vendor="amd") == 1
    assert value(s, "gpu_exporter_collector_success", collector="amd") == 1
    res = run_cli(["doctor", *args], env={fake.ENV_VAR: str(sc.path)})
    assert "gaudi.hlml" in res.stdout and "unavailable" in res.stdout, res.stdout
    assert "--gaudi.hlml-library" in res.stdout and "habanalabs-firmware-tools" in res.stdout


def test_a_host_without_gaudi_says_so(sysfs: FakeSysfs, procfs: Path) -> None:
    sysfs.add("rx6900xt", "0000:0c:00.0", 0)
    _, s = dump([*only("gaudi"), f"--path.sysfs={sysfs.root}", f"--path.procfs={procfs}"],
                None)
    assert value(s, "gpu_exporter_feature_status", feature="gaudi", state="unavailable") == 1
    assert find(s, "hw_gpu_up") == []


def test_the_binding_writes_nothing_to_stdout_on_a_bad_library(
        sysfs: FakeSysfs, procfs: Path, tmp_path: Path) -> None:
    """A file that is no library: dlopen fails before LibHLML would print."""
    sc = two_gaudis(sysfs)
    bad = tmp_path / "libhlml.so"
    bad.write_text("not an ELF\n")
    text, s = dump(gaudi_flags(bad, sysfs, procfs), sc.write(tmp_path / "hlml"))
    promtool_check_metrics(text)
    assert "Failed to load libhlml" not in text
    assert value(s, "gpu_exporter_feature_status", feature="gaudi.hlml",
                 state="unavailable") == 1
    res = run_cli(["doctor", *gaudi_flags(bad, sysfs, procfs)])
    assert f"{bad} cannot be loaded" in res.stdout, res.stdout


def test_a_hung_hlml_init_delays_neither_start_nor_scrape(hlml_lib: Path, sysfs: FakeSysfs,
                                                          procfs: Path, tmp_path: Path) -> None:
    sc = two_gaudis(sysfs)
    path = sc.write(tmp_path / "hlml")
    path.write_text(path.read_text().replace("hlml_version", "init_hang_ms 30000\nhlml_version"))
    started = time.monotonic()
    text, s = dump([*gaudi_flags(hlml_lib, sysfs, procfs), "--scrape.timeout=2"], path)
    took = time.monotonic() - started
    assert took < 20, took  # not the 30 s hlml_init hangs
    promtool_check_metrics(text)
    assert value(s, "gpu_exporter_feature_status", feature="gaudi.hlml",
                 state="unavailable") == 1
    assert [x.value for x in find(s, "hw_gpu_up", hw_vendor="habana")] == [0.0, 0.0]
