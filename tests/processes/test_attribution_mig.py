"""Energy of a GPU in MIG mode, end to end: the real exporter over the fake NVML's MIG H100
(GPU instance 1 with one compute instance, GPU instance 2 with two) splits the parent's
energy among its MIG devices by the GPM engine activity of their GPU instances times their
compute slices, and by compute slices alone when GPM is off."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_nvml import scenario as fake
from tests.helpers import eventually, find, parse
from tests.processes.procfs import write_process
from tests.processes.test_processes import running

GIB = 1024**3
# pid -> (GPU instance, compute instance): one process in each MIG device
PROCESSES = {2001: (1, 0), 2002: (2, 0), 2003: (2, 1)}


def _energy_after_1000_joules(lib: Path, tmp_path: Path, *args: str
                              ) -> tuple[dict[str, float], float]:
    """Process energy by pid and the unattributed total after the parent's counter moved
    by 1,000 J between two scrapes."""
    sc = fake.mig_h100()
    parent = sc.devices[0]
    parent.processes = [("compute", pid, GIB, gi, ci) for pid, (gi, ci) in PROCESSES.items()]
    for pid in PROCESSES:
        write_process(tmp_path / "proc", pid, comm=f"job{pid}", start=pid)
    with running(lib, tmp_path, sc, args) as exp:
        exp.scrape()  # starts GPM: its first values come a window (100 ms) later
        if "--no-collector.nvidia.gpm" not in args:
            eventually(lambda: find(parse(exp.scrape()), "hw_gpu_sm_active_ratio"), 10,
                       "GPM activity")
        parent.values["energy_mj"] = int(parent.values["energy_mj"]) + 1_000_000
        sc.write()
        s = parse(exp.scrape())
    energy = {x.labels["process_pid"]: x.value
              for x in find(s, "process_gpu_energy_consumed_joules_total")}
    lost = sum(x.value for x in find(s, "hw_gpu_energy_unattributed_joules_total"))
    return energy, lost


def test_mig_energy_follows_the_gpm_engine_activity_of_each_gpu_instance(
        lib: Path, tmp_path: Path) -> None:
    energy, lost = _energy_after_1000_joules(lib, tmp_path)
    # GPU instance 1 (3g, engine 70 %): 0.7 x 3; instance 2 (engine 90 %, its own GPM
    # shared by its two 1c compute instances): 0.9 x 1 each
    weights = {"2001": 0.7 * 3, "2002": 0.9, "2003": 0.9}
    total = sum(weights.values())
    assert energy == pytest.approx({pid: 1000 * w / total for pid, w in weights.items()})
    assert sum(energy.values()) + lost == pytest.approx(1000)


def test_mig_energy_is_split_by_compute_slices_without_gpm(
        lib: Path, tmp_path: Path) -> None:
    energy, lost = _energy_after_1000_joules(lib, tmp_path, "--no-collector.nvidia.gpm")
    assert energy == pytest.approx({"2001": 600.0, "2002": 200.0, "2003": 200.0})
    assert lost == pytest.approx(0)
