"""A host with every vendor: the fake NVML for NVIDIA, sysfs captures for AMD and Intel.
One gpu_index order (NVIDIA by NVML index, then AMD, then Intel, each by PCI address),
the spec's labels on every device series, promtool-clean output."""

from __future__ import annotations

from pathlib import Path

from gpu_exporter.collectors import REGISTRY
from tests.fake_nvml import scenario as fake
from tests.helpers import parse, promtool_check_metrics, run_cli, value
from tests.sysfs.tree import FakeSysfs

DEVICE_LABELS = {"hw_id", "hw_name", "hw_vendor", "gpu_index", "gpu_pci_address"}


def test_one_index_order_across_vendors(sysfs: FakeSysfs, procfs: Path, tmp_path: Path
                                        ) -> None:
    sc = fake.rtx4080()
    assert sc.devices[0].pci_bus_id == "00000000:01:00.0"
    sysfs.add("rtx4080", "0000:01:00.0", 0)  # the same card, as sysfs shows it
    # Intel cards sit at lower addresses than the AMD ones: the vendor order wins.
    sysfs.add("b580", "0000:02:00.0", 12)
    sysfs.add("a380", "0000:03:00.0", 3)
    sysfs.add("phoenix", "0000:64:00.0", 1)
    sysfs.add("rx6900xt", "0000:0c:00.0", 2)
    sysfs.add("vega56", "0000:0b:00.0", 10)
    env = fake.env(fake.build(), sc.write(tmp_path / "gpus.scenario"))
    off = [f"--no-collector.{c.name}" for c in REGISTRY
           if c.name not in ("nvidia", "amd", "intel")]
    res = run_cli(["dump", *off, f"--path.sysfs={sysfs.root}", f"--path.procfs={procfs}"],
                  env=env)
    assert res.returncode == 0, res.stderr
    promtool_check_metrics(res.stdout)
    s = parse(res.stdout)
    up = [x for x in s if x.name == "hw_gpu_up"]
    order = sorted((int(x.labels["gpu_index"]), x.labels["hw_vendor"],
                    x.labels["gpu_pci_address"]) for x in up)
    assert order == [
        (0, "nvidia", "0000:01:00.0"),
        (1, "amd", "0000:0b:00.0"),
        (2, "amd", "0000:0c:00.0"),
        (3, "amd", "0000:64:00.0"),
        (4, "intel", "0000:02:00.0"),
        (5, "intel", "0000:03:00.0"),
    ]
    assert all(x.value == 1 for x in up)
    ids = {x.labels["gpu_pci_address"]: x.labels["hw_id"] for x in up}
    assert ids["0000:01:00.0"] == sc.devices[0].uuid
    assert ids["0000:0c:00.0"] == "946d7e1ef9b172dd"  # AMD unique_id
    assert ids["0000:0b:00.0"] == "0000:0b:00.0"  # AMD without unique_id
    assert ids["0000:03:00.0"] == "0000:03:00.0"  # Intel: PCI address
    device_series = [x for x in s if x.name.startswith("hw_")]
    # every device has its series, not only hw_gpu_up
    for address in ids:
        names = {x.name for x in device_series if x.labels["gpu_pci_address"] == address}
        assert {"hw_gpu_info", "hw_gpu_up", "hw_status"} < names, (address, names)
    for x in device_series:
        assert x.labels.keys() >= DEVICE_LABELS, x
        assert x.labels["gpu_pci_address"].count(":") == 2
    for collector in ("nvidia", "amd", "intel"):
        assert value(s, "gpu_exporter_collector_success", collector=collector) == 1
