"""Every NVIDIA GPU this exporter is given appears, even one it cannot read: the GPUs
of the driver's /proc tree (tests/fixtures/procfs/, real file format) against the fake
NVML. A GPU that cannot be read at start reads `hw_gpu_up 0` with its PCI address, its
gpu_index and a hw_id only when a source really gives one, and comes back without a
restart."""

from __future__ import annotations

from pathlib import Path

from gpu_exporter.readers.procfs.nvidia_driver import read_driver_gpus
from tests.fake_nvml import scenario as fake
from tests.helpers import find, parse, promtool_check_metrics, run_cli, value
from tests.nvidia import driverfs
from tests.nvidia.conftest import nvidia_only, running
from tests.nvidia.test_failures import full, uuid, wait_for

FAILED, EXCLUDED = driverfs.FAILED, driverfs.EXCLUDED
RETRY = "--collector.retry-interval=0.3"


def test_driver_list_skips_excluded_gpus_and_takes_no_unknown_uuid_for_an_id(
    tmp_path: Path,
) -> None:
    sysfs = tmp_path / "sys"
    proc = str(driverfs.procfs(tmp_path))
    listed = read_driver_gpus(proc, str(tmp_path / "no-dev"), str(sysfs))
    assert listed is not None and listed.version == "550.54.15"
    by_pci = listed.by_pci()
    assert sorted(by_pci) == sorted(f"0000:{b}:00.0" for b in fake.H100_BUS)
    assert EXCLUDED not in by_pci
    # An SR-IOV virtual function (a vGPU host's) is no GPU of this exporter's either.
    vf = sysfs / "bus" / "pci" / "devices" / "0000:ab:00.0"
    vf.mkdir(parents=True)
    (vf / "physfn").symlink_to("../0000:aa:00.0")
    listed = read_driver_gpus(proc, str(tmp_path / "no-dev"), str(sysfs))
    assert listed is not None and "0000:ab:00.0" not in listed.by_pci()
    assert by_pci[FAILED].uuid is None and by_pci[FAILED].firmware_version is None
    assert by_pci[FAILED].minor == 3 and by_pci[FAILED].name == fake.H100_NAME
    assert by_pci["0000:18:00.0"].uuid == uuid(0)
    assert by_pci["0000:18:00.0"].firmware_version == "96.00.89.00.01"
    assert read_driver_gpus(str(tmp_path / "nothing"), "/dev", "/sys") is None  # not loaded


def test_gpu_lost_before_start_reads_down_and_comes_back_without_a_restart(
    fake_lib: Path, tmp_path: Path
) -> None:
    proc = driverfs.procfs(tmp_path)
    sc = fake.h100x8()
    sc.devices[3].lost = True
    with running(fake_lib, sc, tmp_path, [f"--path.procfs={proc}", RETRY]) as exp:
        text = exp.scrape()
        promtool_check_metrics(text)
        s = parse(text)
        down = find(s, "hw_gpu_up", gpu_pci_address=FAILED)
        assert [x.value for x in down] == [0]
        # NVML counts it as its GPU 3; the driver's ???? UUID is no id.
        assert down[0].labels["gpu_index"] == "3" and "hw_id" not in down[0].labels
        assert down[0].labels["hw_name"] == fake.H100_NAME
        assert value(s, "hw_status", gpu_pci_address=FAILED, hw_state="failed") == 1
        for i in set(range(8)) - {3}:
            assert value(s, "hw_gpu_up", hw_id=uuid(i), gpu_index=str(i)) == 1
        assert not find(s, "hw_gpu_up", gpu_pci_address=EXCLUDED)
        assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 0
        sc.lose(3, False)
        s = wait_for(exp, lambda s: bool(find(s, "hw_gpu_up", hw_id=uuid(3)))
                     and value(s, "hw_gpu_up", hw_id=uuid(3)) == 1)
        assert value(s, "hw_gpu_up", hw_id=uuid(3), gpu_index="3",
                     gpu_pci_address=FAILED) == 1
        assert full(s, uuid(3))
        assert len(find(s, "hw_gpu_up")) == 8
        assert exp.proc.poll() is None


def test_gpu_the_driver_could_not_initialise_reads_down_after_the_readable_ones(
    fake_lib: Path, tmp_path: Path
) -> None:
    proc = driverfs.procfs(tmp_path)
    sc = fake.h100x8()
    absent = sc.devices.pop(3)  # NVML does not count it: GPUs 0-6 are the other seven
    with running(fake_lib, sc, tmp_path, [f"--path.procfs={proc}", RETRY]) as exp:
        s = parse(exp.scrape())
        down = find(s, "hw_gpu_up", gpu_pci_address=FAILED)
        assert [(x.value, x.labels["gpu_index"], "hw_id" in x.labels) for x in down] == \
            [(0, "7", False)]
        assert value(s, "hw_status", gpu_pci_address=FAILED, hw_state="failed") == 1
        assert sorted(x.labels["gpu_index"] for x in find(s, "hw_gpu_up") if x.value) == \
            [str(i) for i in range(7)]
        assert not find(s, "hw_gpu_up", gpu_pci_address=EXCLUDED)
        # The driver initialises it again (a reset): NVML is started again to count it.
        sc.devices.insert(3, absent)
        sc.write()
        driverfs.set_uuid(proc, FAILED, uuid(3))
        s = wait_for(exp, lambda s: len(find(s, "hw_gpu_up")) == 8
                     and all(x.value == 1 for x in find(s, "hw_gpu_up")))
        assert value(s, "hw_gpu_up", hw_id=uuid(3), gpu_index="3",
                     gpu_pci_address=FAILED) == 1
        assert full(s, uuid(3))


def test_identity_read_earlier_is_kept_when_nvml_starts_again_without_the_gpu(
    fake_lib: Path, tmp_path: Path
) -> None:
    proc = driverfs.procfs(tmp_path)
    driverfs.set_uuid(proc, FAILED, uuid(3))
    sc = fake.h100x8()
    with running(fake_lib, sc, tmp_path, [f"--path.procfs={proc}", RETRY]) as exp:
        assert [x.value for x in find(parse(exp.scrape()), "hw_gpu_up")] == [1] * 8
        # The driver is reloaded; GPU 3 does not come back with it.
        sc.init_error = "DRIVER_NOT_LOADED"
        sc.write()
        s = wait_for(exp, lambda s: value(s, "gpu_exporter_feature_status",
                                          feature="nvidia.nvml", state="unavailable") == 1)
        # The driver still lists the GPUs: they read down, with the identities read before.
        assert {x.labels["hw_id"]: x.value for x in find(s, "hw_gpu_up")} == \
            {uuid(i): 0 for i in range(8)}
        sc.devices[3].lost = True
        sc.init_error = None
        sc.write()
        driverfs.set_uuid(proc, FAILED, None)
        s = wait_for(exp, lambda s: sum(x.value for x in find(s, "hw_gpu_up")) == 7)
        assert value(s, "hw_gpu_up", hw_id=uuid(3), gpu_index="3",
                     gpu_pci_address=FAILED) == 0
        assert value(s, "gpu_exporter_feature_status", feature="nvidia.nvml",
                     state="enabled") == 1


def test_without_the_nvml_library_the_driver_gpus_read_down_and_doctor_says_the_fix(
    tmp_path: Path,
) -> None:
    proc = driverfs.procfs(tmp_path)
    res = run_cli(["doctor", *nvidia_only(), f"--path.procfs={proc}"],
                  env=fake.env(None, None))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    at = next(i for i, x in enumerate(lines) if x.strip().startswith("nvidia.nvml"))
    assert "unavailable" in lines[at] and "libnvidia-ml.so.1 not found" in lines[at]
    assert "fix:" in lines[at + 1]
    assert "--gpus all" in lines[at + 1] and "runtimeClassName: nvidia" in lines[at + 1]
    assert next(x for x in lines if x.startswith("nvidia ")).split()[1] == "enabled"
    with running(None, fake.h100x8(), tmp_path, [f"--path.procfs={proc}"]) as exp:
        text = exp.scrape()
    promtool_check_metrics(text)
    s = parse(text)
    up = find(s, "hw_gpu_up")
    assert [x.value for x in up] == [0] * 8
    # gpu_index in PCI order; hw_id where the driver shows a UUID; no health: unknown
    assert {x.labels["gpu_pci_address"]: (x.labels["gpu_index"], x.labels.get("hw_id"))
            for x in up} == {
        f"0000:{b}:00.0": (str(i), None if i == 3 else uuid(i))
        for i, b in enumerate(fake.H100_BUS)}
    assert not find(s, "hw_status")
    assert value(s, "hw_gpu_info", gpu_pci_address="0000:18:00.0",
                 hw_driver_version="550.54.15") == 1
    assert value(s, "gpu_exporter_feature_status", feature="nvidia.nvml",
                 state="unavailable") == 1
    # Nothing failed: the feature state says why the GPUs cannot be read.
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1


def test_gpus_whose_device_node_another_container_has_are_not_expected(
    tmp_path: Path,
) -> None:
    proc = driverfs.procfs(tmp_path)
    dev = driverfs.devfs(tmp_path, [0, 1])
    with running(None, fake.h100x8(), tmp_path,
                 [f"--path.procfs={proc}", f"--nvidia.devfs={dev}"]) as exp:
        s = parse(exp.scrape())
    assert sorted(x.labels["gpu_pci_address"] for x in find(s, "hw_gpu_up")) == \
        ["0000:18:00.0", "0000:2a:00.0"]
