"""Issue #32, the processes collector's side: any local user can start GPU processes under
names of their choosing. 1,500 distinct executable names in two waves on the fake 8-GPU
NVML: each GPU keeps --processes.max-per-gpu processes with series of their own, the rest
are its `other` series, counted once each by gpu_exporter_processes_folded_total; the
series of processes that exited are gone at the next scrape (their energy counters are
dropped, not lowered), and the page stays under 10,000 series."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_nvml import scenario as fake
from tests.helpers import Series, find, parse, promtool_check_metrics, value
from tests.processes.procfs import remove_process, write_process
from tests.processes.test_processes import running

GIB = 1024**3
WAVE, GPUS, CAP = 750, 8, 16  # processes of distinct names per wave; the default cap


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fake.build(tmp_path_factory.mktemp("fake-nvml"))


def _wave(sc: fake.Scenario, procfs: Path, first_pid: int) -> list[int]:
    """WAVE processes, each of its own name, spread over the GPUs (under the fake's ~245
    processes per GPU)."""
    pids = list(range(first_pid, first_pid + WAVE))
    for d in sc.devices:
        d.processes = []
    for i, pid in enumerate(pids):
        write_process(procfs, pid, comm=f"job-{pid}", start=pid)
        sc.devices[i % GPUS].processes.append(("compute", pid, GIB, None, None))
    sc.write()
    return pids


def _lookups(s: list[Series]) -> dict[str, float]:
    return {x.labels["result"]: x.value
            for x in find(s, "gpu_exporter_process_facts_cache_lookups_total")}


def test_1500_executable_names_keep_the_page_under_10000_series(lib: Path,
                                                                tmp_path: Path) -> None:
    procfs = tmp_path / "proc"
    sc = fake.h100x8()
    sc.path = tmp_path / "gpus.scenario"
    first = _wave(sc, procfs, 20_000)
    with running(lib, tmp_path, sc) as exp:
        text = exp.scrape()
        promtool_check_metrics(text)
        s = parse(text)
        names = {x.labels["process_executable_name"]
                 for x in find(s, "process_gpu_memory_usage_bytes")}
        assert len(names - {"other"}) == GPUS * CAP and "other" in names
        assert value(s, "gpu_exporter_processes_folded_total") == WAVE - GPUS * CAP
        assert _lookups(s) == {"hit": 0, "miss": WAVE}  # each process's facts read once
        assert sum(x.value for x in find(s, "process_gpu_memory_usage_bytes")) == WAVE * GIB
        assert len(s) < 10_000
        # The first wave exits, a second of as many new names starts.
        for pid in first:
            remove_process(procfs, pid)
        second = _wave(sc, procfs, 30_000)
        exp.scrape()  # the second wave's energy counters start (a baseline)
        text = exp.scrape()
        s = parse(text)
        left = {x.labels.get("process_pid") for name in (
            "process_gpu_memory_usage_bytes", "process_gpu_energy_consumed_joules_total")
            for x in find(s, name)} - {None}
        assert left and {str(p) for p in first}.isdisjoint(left)
        assert left <= {str(p) for p in second}
        assert value(s, "gpu_exporter_processes_folded_total") == 2 * (WAVE - GPUS * CAP)
        # The second wave read at its first scrape, found in the cache at the next; the
        # first wave's exited processes are no lookup at all.
        assert _lookups(s) == {"hit": WAVE, "miss": 2 * WAVE}
        print(f"\n{len(s)} series, {len(text)} bytes after 1,500 names")
        assert len(s) < 10_000
