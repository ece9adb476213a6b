"""CUDA graphs by kernel: the real exporter, real uprobes, the fake CUDA libraries
capturing streams, adding nodes, instantiating and launching graphs (csrc/graphs.c,
whose counts these are)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ebpf.conftest import Build, Workload, only_ebpf_args, wait_attached, wait_until
from tests.helpers import Series, exporter, find, parse, promtool_check_metrics

# Launches of each executable graph times the kernel nodes it has (csrc/graphs.c).
GRAPH = {"k_a": 7 * 2, "k_b": 7, "k_c": 7, "drv_g": 7,  # captured, S2 joined; 5 + 2 launches
         "k_d": 4 + 1, "k_e": 4 + 1, "drv_h": 4 + 1,  # added; x2 4 times, x3 once
         "k_f": 1,  # captured into the added graph: x3 only
         "unknown": 4}  # an executable graph no probe saw instantiated
RUN = {("runtime", "k_a"): 1, ("runtime", "k_c"): 1}  # after the capture, on both streams


@pytest.fixture(scope="module")
def series(cuda_build: Build) -> Iterator[list[Series]]:
    args = [*only_ebpf_args(), "--collector.ebpf", "--ebpf.rescan-interval=0.2",
            "--ebpf.pid-label"]
    with exporter(args) as exp:
        w = Workload([cuda_build.path("graphs")],
                     {"FAKE_CUDA_FAIL": "cuStreamEndCapture=901x1"})
        wait_attached(exp, cuda_build.dir)
        w.go()
        pid = str(w.proc.pid)

        def launches() -> dict[tuple[str, str], float]:
            return {(x.labels["cuda_api"], x.labels["cuda_kernel_name"]): x.value
                    for x in find(parse(exp.scrape()), "gpu_kernel_launch_calls_total",
                                  process_pid=pid)}

        wait_until(lambda: launches().get(("graph", "k_f")) == 1, "graph launches counted")
        text = exp.scrape()
    promtool_check_metrics(text)
    yield [x for x in parse(text) if x.labels.get("process_pid") in (pid, None)]


def test_each_graph_launch_counts_each_kernel_node_under_its_name(series: list[Series]
                                                                  ) -> None:
    got = {(x.labels["cuda_api"], x.labels["cuda_kernel_name"]): x.value
           for x in find(series, "gpu_kernel_launch_calls_total")}
    assert got == {**{("graph", k): n for k, n in GRAPH.items()}, **RUN}


def test_captured_launches_are_not_runs(series: list[Series]) -> None:
    """Neither counted as launches nor in the launch shapes: 2 kernels ran."""
    assert not find(series, "gpu_kernel_launch_calls_total", cuda_kernel_name="k_lost")
    grid = find(series, "gpu_kernel_grid_size_count")
    assert [x.value for x in grid] == [2]


def test_a_failed_capture_is_an_error(series: list[Series]) -> None:
    errors = {(x.labels["cuda_call"], x.labels["error_type"]): x.value
              for x in find(series, "gpu_cuda_errors_total")}
    assert errors == {("cudaStreamEndCapture", "cudaErrorStreamCaptureInvalidated"): 1}


def test_no_graph_event_dropped(series: list[Series]) -> None:
    dropped = {x.labels["reason"]: x.value
               for x in find(series, "gpu_exporter_ebpf_events_dropped_total")}
    assert dropped["graph_map_full"] == 0 and dropped["graph_event_buffer_full"] == 0
    assert dropped["graph_nodes_full"] == 0
