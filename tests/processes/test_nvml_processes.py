"""NVIDIA processes through the one NVML stack: a driver or GPU without utilization
samples is a feature state, not a failure; a GPU hung in a process call costs only its
own processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_nvml import scenario as fake
from tests.helpers import Series, eventually, find, parse, run_cli, value
from tests.nvidia.test_failures import scrape_within, threads
from tests.processes.test_processes import (
    only_gpu_and_processes,
    procs,
    running,
    scenario,
    uuid,
    write_procs,
)

PIDS = {0: "1001", 1: "1002", 2: "1003", 3: "1005", 5: "1006", 7: "1008"}  # GPU -> a pid


def utilization_states(s: list[Series]) -> dict[str | None, str]:
    return {x.labels.get("hw_id"): x.labels["state"]
            for x in find(s, "gpu_exporter_feature_status",
                          feature="processes.nvml_utilization") if x.value == 1}


def test_a_driver_without_process_utilization_is_a_feature_state_not_a_failure(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    lib = fake.build(tmp_path_factory.mktemp("fake-nvml-no-util"),
                     omit=["nvmlDeviceGetProcessUtilization"])
    write_procs(tmp_path / "proc")
    sc = scenario()
    with running(lib, tmp_path, sc) as exp:
        for _ in range(2):
            s = parse(exp.scrape())
            assert value(s, "gpu_exporter_collector_success", collector="processes") == 1
    assert utilization_states(s) == {None: "unavailable"}
    assert procs(s, process_pid="1001")[0].value == 20 * 1024**3  # memory still there
    assert not find(s, "process_gpu_utilization_ratio")
    res = run_cli(["doctor", *only_gpu_and_processes(), f"--path.procfs={tmp_path / 'proc'}"],
                  env=fake.env(lib, sc.path))
    lines = res.stdout.splitlines()
    at = next(i for i, x in enumerate(lines)
              if x.strip().startswith("processes.nvml_utilization"))
    assert "unavailable" in lines[at] and "nvmlDeviceGetProcessUtilization" in lines[at]
    assert "fix: update the NVIDIA driver" in lines[at + 1]


def test_gpus_without_utilization_samples_are_disabled_each(lib: Path, tmp_path: Path) -> None:
    write_procs(tmp_path / "proc")
    with running(lib, tmp_path, scenario()) as exp:
        s = parse(exp.scrape())
    # Only GPUs 0 and 6 give samples in this scenario; the others answer NOT_SUPPORTED.
    assert utilization_states(s) == {
        uuid(i): "enabled" if i in (0, 6) else "disabled" for i in range(8)}
    assert value(s, "gpu_exporter_collector_success", collector="processes") == 1


def test_a_gpu_hung_in_a_process_call_costs_only_its_own_processes(
    lib: Path, tmp_path: Path
) -> None:
    write_procs(tmp_path / "proc")
    sc = scenario()
    with running(lib, tmp_path, sc, ["--scrape.timeout=1"]) as exp:
        assert len(procs(parse(exp.scrape()))) == 7  # 1007 has no memory figure
        sc.hang(1, "nvmlDeviceGetComputeRunningProcesses_v3", 4.0)
        counts = []
        for _ in range(6):
            s = scrape_within(exp, 1.5)
            assert not procs(s, process_pid="1002")  # GPU 1's: it is stuck
            for gpu, pid in PIDS.items():
                if gpu != 1:
                    assert procs(s, process_pid=pid, hw_id=uuid(gpu)), gpu
            # Its device series are the nvidia collector's, and complete.
            assert [x.value for x in find(s, "hw_gpu_up")] == [1] * 8
            assert value(s, "gpu_exporter_collector_success", collector="processes") == 0
            assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1
            counts.append(threads(exp.proc.pid))
        assert max(counts) - min(counts) <= 2, counts  # no thread per scrape
        sc.hang(1, "nvmlDeviceGetComputeRunningProcesses_v3", None)

        def back() -> list[Series]:
            s = parse(exp.scrape())
            return s if procs(s, process_pid="1002") else []

        s = eventually(back, 10, "GPU 1's processes back", interval=0.2)
        assert value(s, "gpu_exporter_collector_success", collector="processes") == 1
