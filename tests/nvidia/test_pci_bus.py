"""Every NVIDIA GPU the host has is a series, driver or not: a GPU on the PCI bus (sysfs
trees laid out as the kernel does, tests/nvidia/pcibus.py) that the driver does not
expose reads `hw_gpu_up 0` and `hw_status{hw_state="failed"}` by its PCI address, with
the reason and the fix in `nvidia.pci` and doctor; a GPU bound to vfio-pci is not a
failure; audio, NVSwitch, virtual functions and other vendors are not NVIDIA GPUs; a
host without the driver on purpose opts out."""

from __future__ import annotations

import os
from pathlib import Path

from tests.fake_nvml import scenario as fake
from tests.helpers import Series, find, parse, promtool_check_metrics, run_cli, value
from tests.nvidia import driverfs, pcibus
from tests.nvidia.conftest import nvidia_only, running
from tests.nvidia.test_failures import uuid, wait_for
from tests.nvidia.test_features import states

ADDRESSES = [f"0000:{b}:00.0" for b in fake.H100_BUS]
VFIO = "0000:e1:00.0"


def no_driver_host(tmp_path: Path) -> tuple[Path, Path]:
    """No NVIDIA driver loaded: the 8 H100s bound to nothing, one H100 handed to a VM
    (vfio-pci), and what is not an NVIDIA GPU: the H100s' audio function, an NVSwitch, a
    virtual function, an AMD GPU."""
    devices = [
        *pcibus.h100_bus(None),
        pcibus.PciDevice(VFIO, pcibus.H100, "vfio-pci"),
        pcibus.PciDevice("0000:18:00.1", pcibus.AUDIO, None),
        pcibus.PciDevice("0000:05:00.0", pcibus.NVSWITCH, None),
        pcibus.PciDevice("0000:18:00.4", pcibus.H100, None, virtual_function=True),
        pcibus.PciDevice("0000:c1:00.0", pcibus.MI300X, None),
    ]
    sysfs = pcibus.tree(tmp_path / "sys", devices)
    proc = tmp_path / "proc"  # no /proc/driver/nvidia: the driver is not loaded
    proc.mkdir()
    return sysfs, proc


def test_gpus_of_a_host_whose_driver_is_not_loaded_read_failed_by_pci_address(
    tmp_path: Path,
) -> None:
    sysfs, proc = no_driver_host(tmp_path)
    sc = fake.Scenario(devices=[], init_error="DRIVER_NOT_LOADED")
    args = [f"--path.sysfs={sysfs}", f"--path.procfs={proc}"]
    with running(fake.build(), sc, tmp_path, args) as exp:
        text = exp.scrape()
    promtool_check_metrics(text)
    s = parse(text)
    up = find(s, "hw_gpu_up")
    assert sorted(x.labels["gpu_pci_address"] for x in up) == ADDRESSES
    assert all(x.value == 0 and "hw_id" not in x.labels for x in up)
    assert [x.labels["gpu_index"] for x in up] == [str(i) for i in range(8)]
    for address in ADDRESSES:
        assert value(s, "hw_status", gpu_pci_address=address, hw_state="failed") == 1
    assert not find(s, "hw_gpu_up", gpu_pci_address=VFIO)  # handed to a VM: no failure
    assert states(s, "nvidia.pci") == {None: "unavailable"}
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1


def test_doctor_gives_the_reason_the_fix_and_where_the_vfio_gpu_went(tmp_path: Path) -> None:
    sysfs, proc = no_driver_host(tmp_path)
    sc = fake.Scenario(devices=[], init_error="DRIVER_NOT_LOADED")
    res = run_cli(["doctor", *nvidia_only(), f"--path.sysfs={sysfs}", f"--path.procfs={proc}"],
                  env=fake.env(fake.build(), sc.write(tmp_path / "gpus.scenario")))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    at = next(i for i, x in enumerate(lines) if x.strip().startswith("nvidia.pci"))
    assert "unavailable" in lines[at]
    assert "the NVIDIA kernel driver is not loaded: " + ", ".join(ADDRESSES) in lines[at]
    assert f"{VFIO} bound to vfio-pci (handed to a VM)" in lines[at]
    assert "fix: load the NVIDIA kernel module" in lines[at + 1]
    assert "--no-collector.nvidia.pci" in lines[at + 1]
    for other in ("0000:18:00.1", "0000:05:00.0", "0000:18:00.4", "0000:c1:00.0"):
        assert other not in res.stdout


def test_a_host_without_the_driver_on_purpose_opts_out(tmp_path: Path) -> None:
    sysfs, proc = no_driver_host(tmp_path)
    sc = fake.Scenario(devices=[], init_error="DRIVER_NOT_LOADED")
    args = [f"--path.sysfs={sysfs}", f"--path.procfs={proc}", "--no-collector.nvidia.pci"]
    with running(fake.build(), sc, tmp_path, args) as exp:
        s = parse(exp.scrape())
    assert not find(s, "hw_gpu_up")
    assert value(s, "gpu_exporter_feature_status", feature="nvidia",
                 state="unavailable") == 1


def test_a_gpu_the_loaded_driver_did_not_take_reads_failed_beside_the_others(
    tmp_path: Path,
) -> None:
    # The driver lists the 8 H100s (its /proc tree) and NVML reads them; a 9th H100 on the
    # bus is bound to no driver: the driver failed to probe it.
    proc = driverfs.procfs(tmp_path)
    orphan = "0000:f1:00.0"
    devices = [*pcibus.h100_bus("nvidia"), pcibus.PciDevice(orphan, pcibus.H100, None)]
    sysfs = pcibus.tree(tmp_path / "sys", devices)
    sc = fake.h100x8()
    with running(fake.build(), sc, tmp_path,
                 [f"--path.sysfs={sysfs}", f"--path.procfs={proc}"]) as exp:
        s = parse(exp.scrape())
    assert value(s, "hw_gpu_up", gpu_pci_address=orphan) == 0
    assert value(s, "hw_status", gpu_pci_address=orphan, hw_state="failed") == 1
    assert value(s, "hw_gpu_up", gpu_pci_address=orphan, gpu_index="8") == 0
    assert value(s, "hw_gpu_up", hw_id=uuid(0)) == 1


def test_a_container_given_some_gpus_reports_no_other_gpu_of_the_bus(tmp_path: Path) -> None:
    # The container sees the host's whole PCI bus but only its 2 GPUs' driver folders
    # (the NVIDIA runtime): an unbound card elsewhere on the host is not its own.
    proc = driverfs.procfs(tmp_path)
    dev = driverfs.devfs(tmp_path, [0, 1])
    devices = [*pcibus.h100_bus("nvidia"), pcibus.PciDevice("0000:f1:00.0", pcibus.H100)]
    sysfs = pcibus.tree(tmp_path / "sys", devices)
    listed = proc / "driver" / "nvidia" / "gpus"
    for name in os.listdir(listed):
        if name not in ("0000:18:00.0", "0000:2a:00.0"):
            for f in (listed / name).iterdir():
                f.unlink()
            (listed / name).rmdir()
    with running(fake.build(), fake.h100x8(), tmp_path,
                 [f"--path.sysfs={sysfs}", f"--path.procfs={proc}",
                  f"--nvidia.devfs={dev}"]) as exp:
        s = parse(exp.scrape())
    assert not find(s, "hw_gpu_up", gpu_pci_address="0000:f1:00.0")


def test_a_pci_device_whose_class_or_vendor_file_is_unreadable_hides_nothing(
    tmp_path: Path,
) -> None:
    sysfs, proc = no_driver_host(tmp_path)
    base = sysfs / "devices" / "pci0000:00"
    # An unreadable class file (a folder in its place): the uevent's class still tells.
    (base / ADDRESSES[0] / "class").unlink()
    (base / ADDRESSES[0] / "class").mkdir()
    # Nothing readable at all: not known to be a GPU, left out without a traceback.
    for name in ("class", "vendor", "uevent"):
        (base / ADDRESSES[1] / name).unlink()
        (base / ADDRESSES[1] / name).mkdir()
    sc = fake.Scenario(devices=[], init_error="DRIVER_NOT_LOADED")
    with running(fake.build(), sc, tmp_path,
                 [f"--path.sysfs={sysfs}", f"--path.procfs={proc}"]) as exp:
        s = parse(exp.scrape())
        logs = exp.logs()
    got = sorted(x.labels["gpu_pci_address"] for x in find(s, "hw_gpu_up"))
    assert got == [a for a in ADDRESSES if a != ADDRESSES[1]]
    assert "Traceback" not in logs


def test_a_gpu_nvml_counts_but_cannot_identify_is_found_on_the_bus_without_proc(
    tmp_path: Path,
) -> None:
    # No /proc/driver/nvidia in this container, NVML up; GPU 3's identity cannot be read:
    # the bus's GPUs bound to the driver give its PCI address.
    sysfs = pcibus.tree(tmp_path / "sys", pcibus.h100_bus("nvidia"))
    proc = tmp_path / "proc"
    proc.mkdir()
    sc = fake.h100x8()
    sc.devices[3].errors["nvmlDeviceGetPciInfo_v3"] = "GPU_IS_LOST"
    with running(fake.build(), sc, tmp_path,
                 [f"--path.sysfs={sysfs}", f"--path.procfs={proc}"]) as exp:
        s = parse(exp.scrape())
    assert value(s, "hw_gpu_up", gpu_pci_address=ADDRESSES[3], gpu_index="3") == 0
    assert value(s, "hw_status", gpu_pci_address=ADDRESSES[3], hw_state="failed") == 1
    assert len(find(s, "hw_gpu_up")) == 8


def _bare_host(tmp_path: Path) -> list[str]:
    """No /proc/driver/nvidia and no PCI bus to name a GPU by (a container without either
    mounted): NVML's answers are all the exporter has."""
    (tmp_path / "sys").mkdir()
    (tmp_path / "proc").mkdir()
    return [f"--path.sysfs={tmp_path / 'sys'}", f"--path.procfs={tmp_path / 'proc'}"]


def _others_keep_their_index(s: list[Series]) -> None:
    got = {x.labels["hw_id"]: x.labels["gpu_index"] for x in find(s, "hw_gpu_up")
           if "hw_id" in x.labels}
    assert got == {uuid(i): str(i) for i in range(8) if i != 3}, got


def test_a_gpu_lost_at_start_without_proc_or_bus_is_down_by_its_index(tmp_path: Path) -> None:
    """GPU 3 lost before NVML gave its PCI address or UUID: `hw_gpu_up 0` and
    `hw_status` failed by its NVML index (no gpu_pci_address, no hw_id to give), and GPUs
    4-7 keep theirs."""
    sc = fake.h100x8()
    sc.devices[3].errors["nvmlDeviceGetPciInfo_v3"] = "GPU_IS_LOST"
    with running(fake.build(), sc, tmp_path, _bare_host(tmp_path)) as exp:
        text = exp.scrape()
        logs = exp.logs()
    promtool_check_metrics(text)
    s = parse(text)
    down = [x for x in find(s, "hw_gpu_up") if x.value == 0]
    assert [x.labels for x in down] == [
        {"gpu_index": "3", "hw_vendor": "nvidia", "host_name": down[0].labels["host_name"]}]
    assert value(s, "hw_status", gpu_index="3", hw_state="failed") == 1
    assert len(find(s, "hw_gpu_up")) == 8
    _others_keep_their_index(s)
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 0
    assert "GPU is lost" in logs and "Traceback" not in logs


def test_a_gpu_lost_after_its_pci_address_keeps_it(tmp_path: Path) -> None:
    """Lost after NVML gave its PCI address (the UUID call fails): keyed by that address."""
    sc = fake.h100x8()
    sc.devices[3].errors["nvmlDeviceGetUUID"] = "GPU_IS_LOST"
    with running(fake.build(), sc, tmp_path, _bare_host(tmp_path)) as exp:
        s = parse(exp.scrape())
    assert value(s, "hw_gpu_up", gpu_index="3", gpu_pci_address=ADDRESSES[3]) == 0
    assert value(s, "hw_status", gpu_pci_address=ADDRESSES[3], hw_state="failed") == 1
    _others_keep_their_index(s)


def test_a_gpu_hung_at_start_without_proc_or_bus_is_down_by_its_index(tmp_path: Path) -> None:
    """GPU 3's first NVML call hangs past the scrape timeout: down by its NVML index, its
    state unknown (no hw_status: a hang is not yet a failure), the others' indices kept;
    once it answers it is read in full under the same index."""
    sc = fake.h100x8()
    sc.devices[3].hangs["nvmlDeviceGetPciInfo_v3"] = 3.0
    with running(fake.build(), sc, tmp_path, [*_bare_host(tmp_path), "--scrape.timeout=1"]) \
            as exp:
        s = parse(exp.scrape())
        down = [x for x in find(s, "hw_gpu_up") if x.value == 0]
        assert [(x.labels["gpu_index"], "gpu_pci_address" in x.labels, "hw_id" in x.labels)
                for x in down] == [("3", False, False)]
        assert not find(s, "hw_status", gpu_index="3")
        assert len(find(s, "hw_gpu_up")) == 8
        _others_keep_their_index(s)
        sc.devices[3].hangs.clear()
        sc.write()
        s = wait_for(exp, lambda s: all(x.value == 1 for x in find(s, "hw_gpu_up"))
                     and len(find(s, "hw_gpu_up")) == 8, timeout=15)
    assert value(s, "hw_gpu_up", hw_id=uuid(3), gpu_index="3") == 1
