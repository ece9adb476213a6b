"""How fast CUDA graph building fills the eBPF event buffer and how fast the exporter's
event loop empties it (`make bench`, root), the rates docs/performance.md states for the
buffer's size (abi.RINGBUF_PAGES):

- `build`: a process builds, instantiates and launches N one-kernel graphs as fast as the
  probes let it (tests/ebpf/csrc/graphs.c --flood): graphs per second it makes, with the
  event loop running;
- `read_out`: the same N graphs built while the exporter is stopped (SIGSTOP: their events
  wait in the buffer), then the exporter continued: graphs (and records: 4 a graph) per
  second the event loop reads, names and counts, from SIGCONT until the scrape counts
  every launch.

N fits in the buffer (176 bytes a graph), so nothing is lost; the first GRAPHS_MAX graphs
are named, the rest (past the per-process cap) unknown.
"""

from __future__ import annotations

import signal
import subprocess
import time
from typing import Any

import pytest

from gpu_exporter.model import ebpf_abi as abi
from tests.bench.conftest import Results
from tests.drills.test_ebpf_drills import graph_launches, probed, wait_first_launch
from tests.ebpf.conftest import Build, Workload, build_into, copy_program
from tests.helpers import eventually

GRAPHS = 20_000
RECORDS_PER_GRAPH = 4  # graph create, kernel node, instantiate, the launch's new key
BYTES_PER_GRAPH = 3 * 40 + 56


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    return build_into(tmp_path_factory.mktemp("bench-event-rate"))


def _counted(exp: Any, exe: str) -> float:
    return sum(graph_launches(exp, exe).values())


def test_graph_event_rates(benchmark: Any, results: Results, build: Build) -> None:
    assert GRAPHS * BYTES_PER_GRAPH < abi.RINGBUF_PAGES * 4096  # nothing lost
    measured: dict[str, float] = {}

    def run() -> None:
        flood = copy_program(build, "graphs", "graph_rate")
        with probed(build) as exp:
            started = time.monotonic()
            res = subprocess.run([flood, "--flood", str(GRAPHS)], capture_output=True,
                                 text=True, timeout=300)
            assert res.returncode == 0, res.stderr
            measured["build_graphs_per_second"] = GRAPHS / (time.monotonic() - started)
            eventually(lambda: _counted(exp, "graph_rate") >= GRAPHS, 300,
                       "every graph launch of graph_rate counted", interval=0.02)
        held = copy_program(build, "graphs", "graph_held")
        with probed(build) as exp:
            work = Workload([held, "--flood", str(GRAPHS)])
            wait_first_launch(exp, "graph_held")
            exp.proc.send_signal(signal.SIGSTOP)
            try:
                work.go(timeout=300)
            finally:
                started = time.monotonic()
                exp.proc.send_signal(signal.SIGCONT)
            eventually(lambda: _counted(exp, "graph_held") >= GRAPHS, 300,
                       "every graph launch of graph_held counted", interval=0.02)
            seconds = time.monotonic() - started
            measured["read_out_graphs_per_second"] = GRAPHS / seconds
            measured["read_out_records_per_second"] = GRAPHS * RECORDS_PER_GRAPH / seconds
            assert graph_launches(exp, "graph_held") == {
                "k_d": abi.GRAPHS_MAX, "unknown": GRAPHS - abi.GRAPHS_MAX}

    benchmark.pedantic(run, rounds=1, iterations=1)
    results.put("ebpf_event_rate", "one_kernel_graphs", {**measured, "graphs": GRAPHS})
    benchmark.extra_info.update(measured)
    print(f"\nbuild {measured['build_graphs_per_second']:.0f} graphs/s; read out "
          f"{measured['read_out_graphs_per_second']:.0f} graphs/s "
          f"({measured['read_out_records_per_second']:.0f} records/s)")
