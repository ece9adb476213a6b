"""Strings NVML hands out that are not what they should be: a name with bytes that are
not UTF-8 (the fake library gives the byte NN for `\\xNN` in its scenario), and two GPUs
that report the same UUID. Each GPU stays readable and visible, the fault is reported."""

from __future__ import annotations

from pathlib import Path

from tests.fake_nvml import scenario as fake
from tests.helpers import find, parse, promtool_check_metrics, run_cli, value
from tests.nvidia.conftest import nvidia_only, running
from tests.nvidia.test_failures import full, uuid, wait_for

REPLACED = "\ufffd"


def test_a_name_that_is_not_utf8_keeps_its_gpu_up_with_the_bytes_replaced(
        fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    sc.devices[1].name = "NVIDIA H100\\xff 80GB"
    sc.devices[2].serial = "1652\\xc3\\x28"  # a broken two-byte sequence
    sc.driver_version = "550.54\\xfe.15"
    with running(fake_lib, sc, tmp_path) as exp:
        text = exp.scrape()
        promtool_check_metrics(text)
        s = parse(text)
        assert [x.value for x in find(s, "hw_gpu_up")] == [1] * 8
        assert value(s, "hw_gpu_up", hw_id=uuid(1)) == 1
        info = find(s, "hw_gpu_info", hw_id=uuid(1))
        assert [x.labels["hw_name"] for x in info] == [f"NVIDIA H100{REPLACED} 80GB"]
        assert full(s, uuid(1)) and full(s, uuid(2))
        assert find(s, "hw_gpu_info", hw_id=uuid(2))[0].labels["hw_serial_number"] == (
            f"1652{REPLACED}(")
        assert {x.labels["hw_driver_version"] for x in find(s, "hw_gpu_info")} == {
            f"550.54{REPLACED}.15"}


def test_two_gpus_with_one_uuid_are_both_visible_and_reported(
        fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    sc.devices[5].uuid = uuid(4)
    first, second = (f"{uuid(4)}@0000:{fake.H100_BUS[i]}:00.0" for i in (4, 5))
    with running(fake_lib, sc, tmp_path) as exp:
        text = exp.scrape()
        promtool_check_metrics(text)  # no duplicate series
        s = parse(text)
        up = find(s, "hw_gpu_up")
        assert len(up) == 8 and {x.value for x in up} == {1}
        assert len({x.labels["gpu_pci_address"] for x in up}) == 8
        assert not find(s, "hw_gpu_up", hw_id=uuid(4))
        assert value(s, "hw_gpu_up", hw_id=first, gpu_index="4") == 1
        assert value(s, "hw_gpu_up", hw_id=second, gpu_index="5") == 1
        assert full(s, first) and full(s, second)
        # Power is distinct per GPU in the scenario: neither reads the other's.
        assert value(s, "hw_gpu_power_draw_watts", hw_id=first) != value(
            s, "hw_gpu_power_draw_watts", hw_id=second)
        assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 0
        assert "report the same UUID" in exp.logs() and uuid(4) in exp.logs()
        # An XID on one of them is counted on that one only.
        sc.devices[5].xids = [79]
        sc.write()
        s = wait_for(exp, lambda s: bool(find(s, "hw_gpu_xid_errors_total", hw_id=second)))
        assert value(s, "hw_gpu_xid_errors_total", hw_id=second, xid="79") == 1
        assert not find(s, "hw_gpu_xid_errors_total", hw_id=first)
    res = run_cli(["doctor", *nvidia_only()],
                  env=fake.env(fake_lib, sc.write(tmp_path / "doctor.scenario")))
    assert res.returncode == 0, res.stderr
    assert f"GPUs 4 (0000:{fake.H100_BUS[4]}:00.0), 5 (0000:{fake.H100_BUS[5]}:00.0) " \
           f"report the same UUID {uuid(4)}" in res.stdout, res.stdout
