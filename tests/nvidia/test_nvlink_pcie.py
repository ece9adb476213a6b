"""NVLink and the PCIe link of NVIDIA GPUs through the real pynvml over the fake NVML:
link counts by state, traffic and error totals from the field batch (or per link, opt
in), the PCIe link from NVML's link functions, PCIe errors from NVML's counts or else
the kernel's AER counters; GPUs without NVLink have none of it and say so."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_nvml import scenario as fake
from tests.helpers import find, parse, promtool_check_metrics, value
from tests.nvidia.conftest import running
from tests.nvidia.test_failures import uuid
from tests.nvidia.test_features import doctor, states
from tests.sysfs.tree import FakeSysfs, root_port, set_aer

LINKS = fake.H100_NVLINKS
KIB = 1024
STATES = {"active", "inactive", "sleep", "active_traffic_disabled"}


@pytest.fixture(scope="module")
def h100_scrape(fake_lib: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    sc = fake.h100x8()
    sc.devices[6].nvlinks[17].state = "inactive"  # one link of GPU 6 dropped out
    sc.devices[6].nvlinks[16].state = "active_traffic_disabled"
    sc.devices[7].nvlinks[0].state = "sleep"
    sc.devices[4].values["pcie_width_current"] = 8  # trained narrower than its slot
    sc.devices[5].values["pcie_gen_current"] = 1  # idle
    with running(fake_lib, sc, tmp_path_factory.mktemp("nvlink")) as exp:
        return exp.scrape()


def test_links_by_state_traffic_and_errors_of_every_gpu(h100_scrape: str) -> None:
    s = parse(h100_scrape)
    promtool_check_metrics(h100_scrape)
    for i in range(8):
        dev = {"hw_id": uuid(i)}
        by_state = {x.labels["nvlink_state"]: x.value
                    for x in find(s, "hw_gpu_nvlink_links", **dev)}
        want = {6: {"active": 16, "inactive": 1, "active_traffic_disabled": 1},
                7: {"active": 17, "sleep": 1}}.get(i, {"active": LINKS})
        assert by_state == {state: want.get(state, 0) for state in STATES}, i
        # link l moved (i+1)·10⁶ + l KiB out and twice (i+1)·10⁶ + l in: all links summed
        assert value(s, "hw_gpu_nvlink_io_bytes_total", network_io_direction="transmit",
                     **dev) == (LINKS * (i + 1) * 10**6 + sum(range(LINKS))) * KIB
        assert value(s, "hw_gpu_nvlink_io_bytes_total", network_io_direction="receive",
                     **dev) == (LINKS * 2 * (i + 1) * 10**6 + sum(range(LINKS))) * KIB
        for error in ("crc_flit", "crc_data", "recovery", "ecc_data"):
            assert value(s, "hw_errors_total", error_type=f"nvlink_{error}", **dev) == 0
        assert value(s, "hw_errors_total", error_type="nvlink_replay", **dev) == i
        assert not [x for x in s if "nvlink" in x.labels]  # all links together
        # PCIe: NVML's Gen5 x16 (its max is already the lower of GPU and slot)
        assert value(s, "hw_gpu_pcie_current_link_width", **dev) == (8 if i == 4 else 16)
        assert value(s, "hw_gpu_pcie_max_link_width", **dev) == 16
        assert value(s, "hw_gpu_pcie_current_link_transfers_per_second", **dev) == (
            2.5e9 if i == 5 else 32e9)
        assert value(s, "hw_gpu_pcie_max_link_transfers_per_second", **dev) == 32e9
        assert value(s, "hw_errors_total", error_type="pcie_correctable", **dev) == i
        assert value(s, "hw_errors_total", error_type="pcie_fatal", **dev) == 0
    assert states(s, "nvidia.nvlink") == {None: "enabled"}
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1


def test_per_link_series_replace_the_totals(fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    sc.devices[2].nvlinks[5].state = "sleep"
    sc.devices[2].nvlinks[5].recovery = 4
    with running(fake_lib, sc, tmp_path, ["--collector.nvidia.nvlink-per-link"]) as exp:
        text = exp.scrape()
    promtool_check_metrics(text)
    s = parse(text)
    dev = {"hw_id": uuid(2)}
    for link in range(LINKS):
        n = {"nvlink": str(link), **dev}
        want = "sleep" if link == 5 else "active"
        assert {x.labels["nvlink_state"]: x.value
                for x in find(s, "hw_gpu_nvlink_links", **n)} == {
            state: float(state == want) for state in STATES}
        assert value(s, "hw_gpu_nvlink_io_bytes_total", network_io_direction="transmit",
                     **n) == (3 * 10**6 + link) * KIB
        assert value(s, "hw_errors_total", error_type="nvlink_replay", **n) == (
            2 if link == 3 else 0)
        assert value(s, "hw_errors_total", error_type="nvlink_recovery", **n) == (
            4 if link == 5 else 0)
    # per link instead of all links, never both: a sum over the GPU is its total
    assert all("nvlink" in x.labels for x in find(s, "hw_gpu_nvlink_io_bytes_total"))
    assert all("nvlink" in x.labels for x in find(s, "hw_gpu_nvlink_links"))
    assert sum(x.value for x in find(s, "hw_errors_total", error_type="nvlink_replay",
                                     **dev)) == 2
    # flit/data CRC and data ECC have no per-link field for every link: still totals
    [crc] = find(s, "hw_errors_total", error_type="nvlink_crc_flit", **dev)
    assert "nvlink" not in crc.labels
    assert states(s, "nvidia.nvlink") == {None: "enabled"}


def test_a_gpu_without_nvlink_has_none_and_says_so(fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    sc.devices = [sc.devices[0], *fake.rtx4080().devices]  # an H100 beside a GeForce
    with running(fake_lib, sc, tmp_path) as exp:
        s = parse(exp.scrape())
    geforce = sc.devices[1].uuid
    assert find(s, "hw_gpu_nvlink_links", hw_id=uuid(0))
    for family in ("hw_gpu_nvlink_links", "hw_gpu_nvlink_io_bytes_total"):
        assert not find(s, family, hw_id=geforce), family
    assert not [x for x in find(s, "hw_errors_total", hw_id=geforce)
                if x.labels["error_type"].startswith("nvlink_")]
    assert states(s, "nvidia.nvlink") == {uuid(0): "enabled", geforce: "disabled"}
    # its PCIe link idles at Gen2 of Gen4 x16
    assert value(s, "hw_gpu_pcie_current_link_transfers_per_second", hw_id=geforce) == 5e9
    assert value(s, "hw_gpu_pcie_max_link_transfers_per_second", hw_id=geforce) == 16e9
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1
    lines = doctor(fake_lib, sc, tmp_path)
    [line] = [x for x in lines if x.strip().startswith("nvidia.nvlink") and "disabled" in x]
    assert geforce in line and "this GPU has no NVLink" in line


def test_one_nvlink_field_failing_leaves_only_it_absent(fake_lib: Path,
                                                        tmp_path: Path) -> None:
    sc = fake.h100x8()
    sc.devices[3].field_errors[52] = "NO_PERMISSION"  # replay total: a failure, reported
    sc.devices[4].field_errors[165] = "NOT_SUPPORTED"  # no link states on this one
    with running(fake_lib, sc, tmp_path) as exp:
        s = parse(exp.scrape())
    assert not find(s, "hw_errors_total", error_type="nvlink_replay", hw_id=uuid(3))
    assert value(s, "hw_errors_total", error_type="nvlink_recovery", hw_id=uuid(3)) == 0
    assert {x.value for x in find(s, "hw_gpu_nvlink_links", hw_id=uuid(4))} == {0}
    assert find(s, "hw_gpu_nvlink_io_bytes_total", hw_id=uuid(4))
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 0


def test_an_old_driver_without_field_values_makes_nvlink_unavailable(
    old_lib: Path, tmp_path: Path
) -> None:
    with running(old_lib, fake.h100x8(), tmp_path) as exp:
        s = parse(exp.scrape())
    assert states(s, "nvidia.nvlink") == {None: "unavailable"}
    assert not find(s, "hw_gpu_nvlink_links")
    assert len(find(s, "hw_gpu_pcie_current_link_width")) == 8  # functions, not fields


def test_pcie_errors_come_from_aer_where_nvml_has_no_counts(fake_lib: Path,
                                                            tmp_path: Path) -> None:
    """A GeForce card (no NVML PCIe error counts) whose PCI function in sysfs counts
    AER errors, below the root port of its slot."""
    tree = FakeSysfs(tmp_path / "sys")
    gpu = tree.add("rtx4080", "0000:01:00.0", 1, ports=(
        root_port("0000:00:01.1", "1022:1483", "16.0 GT/s PCIe", 16, ("5.0 GT/s PCIe", 16)),
    )).device
    set_aer(gpu, "aer_dev_correctable", 3)
    set_aer(gpu, "aer_dev_nonfatal", 1)
    set_aer(gpu, "aer_dev_fatal", 0)
    set_aer(tree.root / "devices" / "pci0000:00" / "0000:00:01.1", "aer_dev_fatal", 9)
    sc = fake.rtx4080()
    with running(fake_lib, sc, tmp_path, [f"--path.sysfs={tree.root}"]) as exp:
        s = parse(exp.scrape())
    dev = {"hw_id": sc.devices[0].uuid}
    assert value(s, "hw_errors_total", error_type="pcie_correctable", **dev) == 3
    assert value(s, "hw_errors_total", error_type="pcie_nonfatal", **dev) == 1
    assert value(s, "hw_errors_total", error_type="pcie_fatal", **dev) == 0  # not the port's
    # the link itself is NVML's, not sysfs's
    assert value(s, "hw_gpu_pcie_max_link_width", **dev) == 16
