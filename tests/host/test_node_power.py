"""Power and energy of the node besides its GPUs: ACPI power meters and RAPL, read from
sysfs trees laid out as the kernel lays them out (tests/host/power_tree.py), through the
readers and through the exporter (`dump`, `doctor`, a running exporter)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from gpu_exporter.collectors import REGISTRY
from gpu_exporter.collectors.power import RAPL_FIX
from gpu_exporter.readers.file_values import Problems
from gpu_exporter.readers.sysfs import power_meter, powercap
from tests.helpers import (
    REPO,
    eventually,
    exporter,
    find,
    parse,
    promtool_check_metrics,
    run_as_nobody,
    run_cli,
    value,
    world_readable_dir,
)
from tests.host import power_tree as t


def flags(root: Path) -> list[str]:
    return [*(f"--no-collector.{c.name}" for c in REGISTRY if c.name != "power"),
            f"--path.sysfs={root}"]


def feature(series: list, name: str) -> str:  # type: ignore[type-arg]
    [on] = [s.labels["state"] for s in series
            if s.name == "gpu_exporter_feature_status"
            and s.labels["feature"] == f"power.{name}" and s.value == 1]
    return str(on)


# --- readers ---------------------------------------------------------------------------


@pytest.mark.parametrize("modern", [False, True], ids=["legacy", "with_info"])
def test_grace_meters_are_named_by_their_oem_info(tmp_path: Path, modern: bool) -> None:
    t.other_hwmon(tmp_path, 0, "coretemp")
    t.grace(tmp_path, modern=modern)
    meters = power_meter.find_meters(str(tmp_path))
    problems = Problems()
    got = {(m.hw_type, m.hw_id, m.rail): power_meter.read_watts(m, problems)
           for m in meters}
    assert got == {("module", "module0", "module"): 650.0,
                   ("cpu", "socket0", "socket"): 180.0,
                   ("cpu", "socket0", "cpu"): 120.0,
                   ("cpu", "socket0", "sysio"): 60.0}
    assert problems.items == []


def test_a_meter_naming_no_socket_is_the_whole_system(tmp_path: Path) -> None:
    t.power_meter(tmp_path, 2, 0, "", 412_000_000)  # an x86 BMC's meter
    [m] = power_meter.find_meters(str(tmp_path))
    assert (m.hw_type, m.hw_id, m.rail) == ("system", "ACPI000D:00", "system")
    assert power_meter.read_watts(m, Problems()) == 412.0


@pytest.mark.parametrize(("text", "problem"), [
    ("0", None), ("-5000000", "negative value"), ("garbage", "not an integer"),
    ("", None), ("18446744073709551617", "out of range"),
    ("9" * 5000, "value of 5000 digits is out of range")])  # int(): ValueError, before
def test_a_meter_reading_zero_negative_or_garbage_is_missing(
        tmp_path: Path, text: str, problem: str | None) -> None:
    t.power_meter(tmp_path, 1, 0, "CPU Power Socket 0", text)
    [m] = power_meter.find_meters(str(tmp_path))
    problems = Problems()
    assert power_meter.read_watts(m, problems) is None
    if problem is None:  # no measurement: absent, and nothing is wrong with the file
        assert problems.items == []
    else:
        [(_, message)] = problems.items
        assert problem in message


def test_rapl_zones_of_intel_and_amd(tmp_path: Path) -> None:
    intel, amd = tmp_path / "intel", tmp_path / "amd"
    t.intel_two_sockets(intel)
    t.amd_epyc(amd)
    problems = Problems()
    assert [(z.hw_type, z.hw_id, z.rail, z.max_range_uj)
            for z in powercap.find_zones(str(intel), problems)] == [
        ("cpu", "socket0", "package", t.INTEL_RANGE_UJ),
        ("memory", "socket0", "dram", t.INTEL_RANGE_UJ),
        ("cpu", "socket1", "package", t.INTEL_RANGE_UJ),
        ("memory", "socket1", "dram", t.INTEL_RANGE_UJ)]  # psys left out
    assert [(z.hw_type, z.hw_id, z.rail)
            for z in powercap.find_zones(str(amd), problems)] == [
        ("cpu", "socket0", "package"), ("cpu", "socket0", "core")]
    assert problems.items == []


def test_rapl_counter_never_goes_back_across_its_wrap_or_a_restart(tmp_path: Path) -> None:
    t.amd_epyc(tmp_path)
    zone = powercap.find_zones(str(tmp_path), Problems())[0]
    totals = powercap.EnergyTotals()
    top = t.AMD_RANGE_UJ
    start = (top - 5_000_000) / 1e6
    assert totals.joules(zone, top - 5_000_000, 0.0) == pytest.approx(start, abs=1e-6)
    # 5 J to the wrap, 2 J after it: 7 J more in a second, never a drop to 2 J
    assert totals.joules(zone, 2_000_000, 1.0) == pytest.approx(start + 7, abs=1e-6)
    assert totals.joules(zone, 3_000_000, 2.0) == pytest.approx(start + 8, abs=1e-6)
    # the driver reloaded: 0.5 J a second later. A wrap would be 65 kJ in one second,
    # which no zone draws: the counter started again, and only its 0.5 J is added
    assert totals.joules(zone, 500_000, 3.0) == pytest.approx(start + 8.5, abs=1e-6)
    # 65 W for a thousand seconds up to the top, then a real wrap: 1 J + 1 J
    assert totals.joules(zone, top - 1_000_000, 1003.0) == pytest.approx(
        start + 8 + (top - 1_000_000) / 1e6, abs=1e-6)
    assert totals.joules(zone, 1_000_000, 1004.0) == pytest.approx(
        start + 8 + (top + 1_000_000) / 1e6, abs=1e-6)


def test_a_power_file_that_is_not_a_regular_file_is_never_read(tmp_path: Path) -> None:
    """The held read checks what it opened: a FIFO where power1_average should be is
    refused (no wait for a writer), a problem, absent."""
    average = t.power_meter(tmp_path, 1, 0, "", 300_000_000)
    average.unlink()
    os.mkfifo(average)
    [m] = power_meter.find_meters(str(tmp_path))
    problems = Problems()
    assert power_meter.read_watts(m, problems) is None
    assert "is a FIFO, not a regular file" in problems.items[0][1]
    power_meter.close([m])


def test_rapl_value_over_its_range_is_garbage(tmp_path: Path) -> None:
    files = t.amd_epyc(tmp_path)
    files["package-0"].write_text(f"{t.AMD_RANGE_UJ + 1}\n")
    zone = powercap.find_zones(str(tmp_path), Problems())[0]
    problems = Problems()
    assert powercap.read_uj(zone, problems) is None
    assert "out of range" in problems.items[0][1]


# --- the collector ---------------------------------------------------------------------


def test_dump_reports_each_rail_once_by_the_ladder(tmp_path: Path) -> None:
    """An ACPI socket meter and RAPL's package of the same socket measure the same rail:
    the meter wins, socket1 (no meter) keeps RAPL's package; DRAM is RAPL's alone."""
    t.intel_two_sockets(tmp_path, start_uj=5_000_000)
    t.power_meter(tmp_path, 1, 0, "Grace Power Socket 0", 180_000_000)
    res = run_cli(["dump", *flags(tmp_path)])
    assert res.returncode == 0, res.stderr
    promtool_check_metrics(res.stdout)
    s = parse(res.stdout)
    assert value(s, "hw_power_watts", hw_id="socket0", hw_power_rail="socket",
                 hw_type="cpu") == 180.0
    assert not find(s, "hw_energy_joules_total", hw_id="socket0", hw_power_rail="package")
    energy = {(x.labels["hw_id"], x.labels["hw_power_rail"]): x.value
              for x in find(s, "hw_energy_joules_total")}
    assert energy == {("socket0", "dram"): 5.0, ("socket1", "package"): 5.0,
                      ("socket1", "dram"): 5.0}
    assert value(s, "gpu_exporter_collector_success", collector="power") == 1
    assert feature(s, "acpi_power_meter") == feature(s, "rapl") == "enabled"
    doctor = run_cli(["doctor", *flags(tmp_path)]).stdout
    assert "socket0 package taken from the ACPI power meter" in doctor


@pytest.mark.parametrize("garbage", ["-3", "9" * 5000])
def test_garbage_meter_fails_the_collector_not_the_scrape(tmp_path: Path,
                                                          garbage: str) -> None:
    """A 5,000-digit value (issue #32) took the whole power collector down (int() past
    Python's 4,300 digits raised out of it): now one rail is missing, the others read."""
    t.grace(tmp_path)["CPU"].write_text(garbage + "\n")
    rapl = t.intel_two_sockets(tmp_path, start_uj=5_000_000)
    rapl["package-1"].write_text(garbage + "\n")  # a RAPL counter read as garbage too
    s = parse(run_cli(["dump", *flags(tmp_path)]).stdout)
    assert not find(s, "hw_energy_joules_total", hw_id="socket1", hw_power_rail="package")
    assert value(s, "hw_energy_joules_total", hw_id="socket1", hw_power_rail="dram") == 5.0
    assert value(s, "gpu_exporter_collector_success", collector="power") == 0
    assert not find(s, "hw_power_watts", hw_power_rail="cpu")
    assert value(s, "hw_power_watts", hw_power_rail="sysio") == 60.0


def test_nothing_to_read_is_a_state_with_its_fix(tmp_path: Path) -> None:
    t.other_hwmon(tmp_path, 0, "coretemp")
    res = run_cli(["doctor", *flags(tmp_path)])
    assert "no ACPI power meter (hwmon name power_meter)" in res.stdout
    assert "modprobe acpi_power_meter" in res.stdout
    assert "modprobe intel_rapl_msr" in res.stdout
    s = parse(run_cli(["dump", *flags(tmp_path)]).stdout)
    [on] = [x for x in find(s, "gpu_exporter_feature_status", feature="power")
            if x.value == 1]
    assert on.labels["state"] == "unavailable"
    assert not find(s, "hw_power_watts")


def test_energy_uj_unreadable_as_non_root_names_the_fix() -> None:
    """energy_uj is 0400 root since CVE-2020-8694: the exporter run as nobody reads
    nothing of RAPL, fails no scrape, and doctor says what grants it."""
    with world_readable_dir("gpu-exporter-rapl-") as root:
        t.intel_two_sockets(root)
        t.power_meter(root, 1, 0, "", 300_000_000)  # 0444: still read
        res = run_as_nobody(["doctor", *flags(root)])
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        i = next(i for i, x in enumerate(lines) if x.strip().startswith("power.rapl "))
        assert "unavailable" in lines[i] and "permission denied" in lines[i]
        assert "CVE-2020-8694" in lines[i + 1] and "runAsUser 0" in lines[i + 1]
        dump = run_as_nobody(["dump", *flags(root)])
        assert dump.returncode == 0, dump.stderr
        s = parse(dump.stdout)
        assert value(s, "gpu_exporter_collector_success", collector="power") == 1
        assert not find(s, "hw_energy_joules_total")
        assert value(s, "hw_power_watts", hw_power_rail="system") == 300.0


def test_a_reboot_is_a_counter_reset(tmp_path: Path) -> None:
    """The exporter restarts with the machine: its counter starts again at the kernel's
    new, lower value, which Prometheus's rate() takes as a reset."""
    package = t.amd_epyc(tmp_path, start_uj=50_000_000_000)["package-0"]
    before = parse(run_cli(["dump", *flags(tmp_path)]).stdout)
    assert value(before, "hw_energy_joules_total", hw_power_rail="package") == 50_000.0
    package.write_text("2000000\n")
    after = parse(run_cli(["dump", *flags(tmp_path)]).stdout)
    assert value(after, "hw_energy_joules_total", hw_power_rail="package") == 2.0


def test_a_running_exporter_counts_across_the_wrap(tmp_path: Path) -> None:
    package = t.amd_epyc(tmp_path, start_uj=t.AMD_RANGE_UJ - 400_000)["package-0"]
    with exporter(flags(tmp_path)) as exp:
        first = value(parse(exp.scrape()), "hw_energy_joules_total",
                      hw_power_rail="package")
        # 0.4 J to the wrap, 0.6 J after it (1 J: a wrap however soon the next scrape)
        package.write_text("600000\n")
        s = parse(exp.scrape())
        assert value(s, "hw_energy_joules_total", hw_power_rail="package") == \
            pytest.approx(first + 1.0, abs=1e-6)
        # power from the counter between scrapes: positive across the wrap
        assert value(s, "hw_power_watts", hw_power_rail="package") > 0


def test_sources_that_appear_or_go_while_it_runs(tmp_path: Path) -> None:
    """As with node_exporter, a RAPL zone whose driver is loaded after the exporter
    started (intel_rapl_msr) is read without a restart, within the retry interval, and
    its counter starts at the kernel's value; a meter that goes (acpi_power_meter
    unloaded, its hwmon removed) stops being reported."""
    t.power_meter(tmp_path, 1, 0, "", 300_000_000)  # a BMC's whole-system meter
    with exporter([*flags(tmp_path), "--collector.retry-interval=1"]) as exp:
        s = parse(exp.scrape())
        assert value(s, "hw_power_watts", hw_power_rail="system") == 300.0
        assert feature(s, "rapl") == "disabled"
        assert not find(s, "hw_energy_joules_total")
        t.intel_two_sockets(tmp_path, start_uj=7_000_000)

        def zones() -> list[tuple[str, str, float]]:
            s = parse(exp.scrape())
            return sorted((x.labels["hw_id"], x.labels["hw_power_rail"], x.value)
                          for x in find(s, "hw_energy_joules_total"))

        assert eventually(zones, 60, "the RAPL zones loaded later") == [
            ("socket0", "dram", 7.0), ("socket0", "package", 7.0),
            ("socket1", "dram", 7.0), ("socket1", "package", 7.0)]
        assert feature(parse(exp.scrape()), "rapl") == "enabled"
        (tmp_path / "class" / "hwmon" / "hwmon1").unlink()
        shutil.rmtree(tmp_path / "devices" / "LNXSYSTM:00")
        eventually(lambda: not find(parse(exp.scrape()), "hw_power_watts",
                                    hw_power_rail="system"), 60, "the meter gone")
        s = parse(exp.scrape())
        assert feature(s, "acpi_power_meter") == "disabled"
        assert value(s, "gpu_exporter_collector_success", collector="power") == 1
        assert len(find(s, "hw_energy_joules_total")) == 4
        logs = exp.logs()
    assert "Traceback" not in logs, logs


def _reads_root_only_files(uid: int, caps: set[str]) -> bool:
    """energy_uj is 0400 root: its owner reads it with no capability, anyone else needs
    one that bypasses read permission."""
    return uid == 0 or bool(caps & {"DAC_READ_SEARCH", "DAC_OVERRIDE"})


def _caps(text: str, pattern: str) -> set[str]:
    m = re.search(pattern, text, re.M)
    return {c.strip().removeprefix("CAP_") for c in re.split(r"[\s,]+", m.group(1))
            if c.strip()} if m else set()


def test_what_each_deploy_file_grants_energy_uj_is_what_the_docs_say() -> None:
    """docs/node-power.md's table of deployments, each row checked against the file it
    names: whether that deployment's user and capabilities read a root-only file."""
    deploy = REPO / "deploy"
    [daemonset] = [d for d in yaml.safe_load_all(
        (deploy / "kubernetes/base/daemonset.yaml").read_text()) if d["kind"] == "DaemonSet"]
    security = daemonset["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    k8s_uid = security["runAsUser"]
    assert security["capabilities"]["drop"] == ["ALL"]
    overlays = {name: _caps((deploy / f"kubernetes/overlays/{name}/kustomization.yaml")
                            .read_text(), r"^\s*add: \[(.*)\]")
                for name in ("ebpf", "process-fdinfo")}
    image_uid = int(re.search(r"^USER (\d+)", (REPO / "Dockerfile").read_text(),
                              re.M).group(1))  # type: ignore[union-attr]
    compose = yaml.safe_load((deploy / "compose/compose.yaml").read_text())
    compose_ebpf_text = (deploy / "compose/compose.ebpf.yaml").read_text()
    compose_ebpf = yaml.safe_load(compose_ebpf_text)["services"]["gpu-exporter"]
    unit = (deploy / "systemd/gpu-exporter.service").read_text()
    assert "DynamicUser=yes" in unit
    unit_caps = _caps(unit, r"^AmbientCapabilities=(.*)$")
    drop_ins = {name: _caps((deploy / f"systemd/gpu-exporter.service.d/{name}").read_text(),
                            r"^AmbientCapabilities=(.*)$")
                for name in ("ebpf.conf", "process-fdinfo.conf")}
    dynamic_uid = 61184  # systemd's DynamicUser range starts here: never 0
    from_files = {
        "`deploy/kubernetes` (DaemonSet)": _reads_root_only_files(k8s_uid, set()),
        "`deploy/kubernetes/overlays/ebpf` or `process-fdinfo`": all(
            _reads_root_only_files(k8s_uid, c) for c in overlays.values()),
        "`Dockerfile` (image alone, `docker run`)": _reads_root_only_files(image_uid, set()),
        "`deploy/compose` (`compose.yaml`)": _reads_root_only_files(
            int(str(compose["services"]["gpu-exporter"].get("user", image_uid))
                .split(":")[0]), set()),
        "`deploy/compose` with `compose.ebpf.yaml`": _reads_root_only_files(
            int(compose_ebpf["user"].split(":")[0]), set(compose_ebpf["cap_add"])),
        "`deploy/systemd`": _reads_root_only_files(dynamic_uid, unit_caps),
        "`deploy/systemd` with `ebpf.conf` or `process-fdinfo.conf`": all(
            _reads_root_only_files(dynamic_uid, c) for c in drop_ins.values()),
    }
    doc = (REPO / "docs" / "node-power.md").read_text()
    table = doc.split("| deployment | runs as | RAPL |", 1)[1].split("\n\n", 1)[0]
    in_doc = {}
    for row in table.strip().splitlines()[1:]:
        name, _, rapl = (c.strip() for c in row.strip("|").split("|")[:3])
        assert rapl.startswith(("read", "not read")), row
        in_doc[name] = rapl.startswith("read")
    assert in_doc == from_files
    # and the fix doctor names says the same of each
    for said in ("runAsUser 0", "10001", "DynamicUser", "systemd-tmpfiles"):
        assert said in RAPL_FIX


def test_an_acpi_power_meter_keeps_the_collector_on_its_worker(tmp_path: Path) -> None:
    """An ACPI meter's reading runs firmware (_PMM), which may wait for the BMC: the
    collector is then guarded (a worker of its own); RAPL alone runs on the scrape's
    thread."""
    from gpu_exporter.collectors.power import PowerCollector
    from gpu_exporter.model.settings import Settings

    rapl, acpi = tmp_path / "rapl", tmp_path / "acpi"
    t.intel_two_sockets(rapl)
    t.grace(acpi)
    for root, guarded in ((rapl, False), (acpi, True)):
        collector = PowerCollector(Settings(sysfs=str(root)))
        assert collector.start().state == "enabled"
        assert collector.guarded() is guarded, root
        collector.close()
