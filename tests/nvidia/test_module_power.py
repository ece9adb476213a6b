"""NVML's module power scope on superchips (GH200/GB200): the module's power, reported
once per module (nvmlDeviceGetPlatformInfo's moduleId), never once per GPU, and left to
the ACPI power meter's Module Power Socket where the node has one (the ladder)."""

from __future__ import annotations

from pathlib import Path

from gpu_exporter.collectors import REGISTRY
from tests.fake_nvml import scenario as fake
from tests.helpers import Exporter, eventually, exporter, find, parse, run_cli
from tests.host import power_tree


def _dump(lib: Path, sc: fake.Scenario, tmp_path: Path) -> list:  # type: ignore[type-arg]
    sysfs = tmp_path / "sys"
    sysfs.mkdir(exist_ok=True)
    on = ("nvidia", "power")
    args = ["dump", *(f"--no-collector.{c.name}" for c in REGISTRY if c.name not in on),
            "--collector.nvidia", f"--path.sysfs={sysfs}"]
    res = run_cli(args, env=fake.env(lib, sc.write(tmp_path / "gpus.scenario")))
    assert res.returncode == 0, res.stderr
    return parse(res.stdout)


def _state(series: list, feature: str) -> list[str]:  # type: ignore[type-arg]
    return [s.labels["state"] for s in find(series, "gpu_exporter_feature_status",
                                            feature=feature) if s.value == 1]


def test_a_gb200_tray_reports_each_module_once(fake_lib: Path, tmp_path: Path) -> None:
    s = _dump(fake_lib, fake.gb200_tray(), tmp_path)
    modules = {x.labels["hw_id"]: x.value
               for x in find(s, "hw_power_watts", hw_power_rail="module")}
    assert modules == {"module0": 1900.0, "module1": 2100.0}  # 2 series for 4 GPUs
    assert all(x.labels["hw_type"] == "module"
               for x in find(s, "hw_power_watts", hw_power_rail="module"))
    assert _state(s, "nvidia.module_power") == ["enabled"]
    assert len(find(s, "hw_gpu_power_draw_watts")) == 4  # the GPUs' own, as ever


def test_the_acpi_module_meter_wins_the_rail(fake_lib: Path, tmp_path: Path) -> None:
    power_tree.grace(tmp_path / "sys")  # Module Power Socket 0: 650 W
    s = _dump(fake_lib, fake.gb200_tray(), tmp_path)
    modules = find(s, "hw_power_watts", hw_power_rail="module")
    assert [(x.labels["hw_id"], x.value) for x in modules] == [("module0", 650.0)]
    assert _state(s, "nvidia.module_power") == ["disabled"]


def test_no_module_on_a_gpu_that_is_not_a_superchip(fake_lib: Path, tmp_path: Path) -> None:
    s = _dump(fake_lib, fake.Scenario(devices=[fake.h100(0)]), tmp_path)
    assert not find(s, "hw_power_watts")
    assert _state(s, "nvidia.module_power") == []


def test_an_acpi_module_meter_found_later_takes_the_rail_over(fake_lib: Path,
                                                               tmp_path: Path) -> None:
    """acpi_power_meter loaded after the exporter started: once the power collector
    finds the Module Power Socket meter (every retry interval), NVML's module scope is
    no longer reported beside it, so the module is never counted under two ids."""
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    on = ("nvidia", "power")
    args = [*(f"--no-collector.{c.name}" for c in REGISTRY if c.name not in on),
            "--collector.nvidia", f"--path.sysfs={sysfs}", "--collector.retry-interval=1"]
    env = fake.env(fake_lib, fake.gb200_tray().write(tmp_path / "gpus.scenario"))

    def modules(exp: Exporter) -> list[tuple[str, float]]:
        return sorted((x.labels["hw_id"], x.value) for x in
                      find(parse(exp.scrape()), "hw_power_watts", hw_power_rail="module"))

    with exporter(args, env=env) as exp:
        eventually(lambda: modules(exp) == [("module0", 1900.0), ("module1", 2100.0)], 60,
                   "NVML's two modules")
        power_tree.grace(sysfs)  # Module Power Socket 0: 650 W
        eventually(lambda: modules(exp) == [("module0", 650.0)], 60,
                   "the ACPI module meter alone")
        assert _state(parse(exp.scrape()), "nvidia.module_power") == ["disabled"]
