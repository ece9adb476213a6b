"""Energy per process on an Intel GPU, end to end: the real exporter over a fake /sys (a
real A380 capture whose hwmon energy counter a test moves) and a fake /proc whose DRM
clients' engine times move; the exposition is checked as Prometheus would read it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpu_exporter.collectors import REGISTRY
from tests.helpers import Series, exporter, find, parse, promtool_check_metrics, value
from tests.processes.procfs import remove_process, write_process
from tests.sysfs.tree import FakeSysfs

ADDRESS = "0000:03:00.0"
JOB_CGROUP = "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n"


def _i915(client_id: int, render_ns: int) -> str:
    return (f"pos:\t0\nflags:\t02100002\ndrm-driver:\ti915\ndrm-client-id:\t{client_id}\n"
            f"drm-pdev:\t{ADDRESS}\ndrm-resident-local0:\t1024 KiB\n"
            f"drm-engine-render:\t{render_ns} ns\ndrm-engine-copy:\t0 ns\n")


def _client(procfs: Path, pid: int, comm: str, render_ns: int, cgroup: str = "0::/\n") -> None:
    write_process(procfs, pid, comm=comm, cgroup=cgroup, start=pid,
                  fdinfo={5: _i915(pid, render_ns)})


def _energy(sysfs: FakeSysfs, joules: float) -> None:
    for f in sysfs.root.glob(f"devices/pci0000:00/{ADDRESS}/hwmon/hwmon*/energy1_input"):
        f.write_text(f"{round(joules * 1e6)}\n")


def _energy_series(series: list[Series]) -> tuple[dict[str, float], dict[str, float], float]:
    procs = {s.labels.get("process_pid", "other"): s.value
             for s in find(series, "process_gpu_energy_consumed_joules_total")}
    lost = {s.labels["reason"]: s.value
            for s in find(series, "hw_gpu_energy_unattributed_joules_total")}
    return procs, lost, value(series, "hw_gpu_energy_consumed_joules_total")


def _node(tmp_path: Path, *extra: str) -> tuple[FakeSysfs, Path, list[str]]:
    """An Intel A380 and an empty /proc; the flags of an exporter with the intel and
    processes collectors on them."""
    sysfs = FakeSysfs(tmp_path / "sys")
    sysfs.add("a380", ADDRESS, 0)
    procfs = tmp_path / "proc"
    keep = {"intel", "processes"}
    args = [*(f"--no-collector.{c.name}" for c in REGISTRY if c.name not in keep),
            *(f"--collector.{c}" for c in keep), *extra,
            f"--path.sysfs={sysfs.root}", f"--path.procfs={procfs}",
            f"--processes.kubelet-socket={tmp_path / 'none.sock'}"]
    return sysfs, procfs, args


def test_an_intel_gpu_s_energy_is_split_by_engine_time(tmp_path: Path) -> None:
    sysfs, procfs, args = _node(tmp_path)
    _energy(sysfs, 1000.0)
    _client(procfs, 3001, "llama", 0, JOB_CGROUP)
    _client(procfs, 3002, "ollama", 0)
    with exporter(args) as exp:
        first = parse(exp.scrape())
        # 300 ms of render time for 3001, 100 ms for 3002 in over half a second; 100 J.
        time.sleep(0.6)
        _energy(sysfs, 1100.0)
        _client(procfs, 3001, "llama", 300_000_000, JOB_CGROUP)
        _client(procfs, 3002, "ollama", 100_000_000)
        second_text = exp.scrape()
        # 3002 exits, 3003 starts; 40 J: all to 3001, still there; 3003 starts at 0.
        remove_process(procfs, 3002)
        _client(procfs, 3003, "whisper", 0)
        _energy(sysfs, 1140.0)
        third = parse(exp.scrape())
        # Nobody left: 25 J to no_process.
        for pid in (3001, 3003):
            remove_process(procfs, pid)
        _energy(sysfs, 1165.0)
        fourth = parse(exp.scrape())
    promtool_check_metrics(second_text)
    second = parse(second_text)

    assert _energy_series(first) == ({"3001": 0.0, "3002": 0.0},
                                     {"no_process": 0.0, "no_activity_data": 0.0}, 1000.0)
    procs, lost, hw = _energy_series(second)
    # (each client's busy time is divided by the time between its own two reads)
    assert procs == pytest.approx({"3001": 75.0, "3002": 25.0}, rel=1e-3)
    assert sum(procs.values()) == pytest.approx(100.0, rel=1e-12)
    assert lost == {"no_process": 0.0, "no_activity_data": 0.0} and hw == 1100.0
    assert _energy_series(third)[0] == pytest.approx(
        {"3001": procs["3001"] + 40.0, "3003": 0.0}, rel=1e-12)
    procs, lost, hw = _energy_series(fourth)
    assert procs == {} and lost == pytest.approx({"no_process": 25.0, "no_activity_data": 0.0})
    # The process series carry the device, the executable and the Slurm job.
    (llama,) = find(second, "process_gpu_energy_consumed_joules_total", process_pid="3001")
    assert llama.labels.items() >= {"gpu_pci_address": ADDRESS, "hw_vendor": "intel",
                                    "process_executable_name": "llama",
                                    "slurm_job_id": "4242"}.items()
    assert "slurm_job_id" not in find(second, "process_gpu_memory_usage_bytes",
                                      process_pid="3002")[0].labels


def test_processes_beyond_the_cap_are_folded_into_other(tmp_path: Path) -> None:
    sysfs, procfs, args = _node(tmp_path, "--processes.max-per-gpu=2")
    _energy(sysfs, 0.0)
    for pid in (4001, 4002, 4003, 4004):
        _client(procfs, pid, f"worker{pid}", 0)
    with exporter(args) as exp:
        first = parse(exp.scrape())
        time.sleep(0.3)
        _energy(sysfs, 10.0)
        for pid in (4001, 4002, 4003, 4004):
            _client(procfs, pid, f"worker{pid}", 50_000_000)
        text = exp.scrape()
    promtool_check_metrics(text)
    second = parse(text)
    for s in (first, second):
        memory = {x.labels.get("process_pid", x.labels["process_executable_name"]): x.value
                  for x in find(s, "process_gpu_memory_usage_bytes")}
        # the first two seen keep their series; the others share one, memory added up
        assert memory == {"4001": 1024 * 1024, "4002": 1024 * 1024, "other": 2048 * 1024}
        assert value(s, "gpu_exporter_processes_folded_total") == 2  # once each
    (other,) = find(second, "process_gpu_energy_consumed_joules_total",
                    process_executable_name="other")
    assert set(other.labels) >= {"hw_id", "gpu_index"} and "process_pid" not in other.labels
    procs, lost, _ = _energy_series(second)
    # equal busy time: the folded pair is charged for two processes' share
    assert procs == pytest.approx({"4001": 2.5, "4002": 2.5, "other": 5.0}, rel=1e-3)
    assert sum(procs.values()) + sum(lost.values()) == pytest.approx(10.0, rel=1e-12)
