"""CUDA graphs by kernel: the real exporter, real uprobes, the fake CUDA libraries
capturing streams, adding nodes, instantiating and launching graphs (csrc/graphs.c,
whose counts these are); cloning graphs, updating executable graphs, child graphs and
cudaGraphAddNode_v2 in a second process (graphs --follow); CUDA 13's entry points in a
third (graphs13, on the fake runtime built as libcudart.so.13: cudaGraphAddNode, kernel
nodes given by handle, cuGraphAddNode_v3, cuCtxSynchronize_v2)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.ebpf.conftest import (
    Build,
    Workload,
    attached,
    engine,
    only_ebpf_args,
    wait_attached,
    wait_until,
)
from tests.helpers import Series, exporter, find, parse, promtool_check_metrics

# Launches of each executable graph times the kernel nodes it has (csrc/graphs.c).
GRAPH = {"k_a": 7 * 2, "k_b": 7, "k_c": 7, "drv_g": 7,  # captured, S2 joined; 5 + 2 launches
         "k_d": 4 + 1, "k_e": 4 + 1, "drv_h": 4 + 1,  # added; x2 4 times, x3 once
         "k_f": 1,  # captured into the added graph: x3 only
         "unknown": 4}  # an executable graph no probe saw instantiated
RUN = {("runtime", "k_a"): 1, ("runtime", "k_c"): 1}  # after the capture, on both streams
# graphs --follow (follow() in csrc/graphs.c), by part:
CLONED = {"c_kept": 1,  # a clone that failed: the handle still holds its graph
          "c_a": 2 + 3, "c_drv": 2 + 3,  # a runtime clone 2 times, a driver clone 3 times
          "c_b": 3}  # added to the original after the first clone: the driver clone's
UPDATED = {"u_old": 3 + 4,  # before the first update, and after the driver update to it
           "u_new": 2 + 1 + 5}  # after the update, after a failed one, after CUDA 11's
CHILDREN = {k: 2 for k in ("p_own", "ch_a", "ch_b", "ch_c", "ch_d")}  # ch_late: not there
ADDED_V2 = {k: 3 for k in ("v_a", "v_drv", "v_ch", "v_ch2")}
LAST = {"f_last": 1}  # the last graph launched
FOLLOWED = {**CLONED, **UPDATED, **CHILDREN, **ADDED_V2, **LAST}
FOLLOW_FAIL = "cudaGraphClone=2x1"  # cudaErrorMemoryAllocation, the first call
# graphs13: two kernel nodes and a child graph added by CUDA 13's cudaGraphAddNode (the
# count in 5th place, the parameters in 6th), launched 3 times; then the last graph once.
ADDED_13 = {"n13_a": 3, "n13_b": 3, "n13_ch": 3, "n13_last": 1}
BY_HANDLE_13 = {"n13_kern": 2}  # a kernel node given by its cudaKernel_t (CUDA 13.2)
# A kernel node, one given by its CUkernel (func NULL) and a child graph added by
# cuGraphAddNode_v3 (CUDA 13.4), launched twice.
ADDED_V3 = {"n13_drv": 2, "n13_lib": 2, "n13_ch3": 2}
# Recaptured (CUDA 13.3): once as captured, twice as recaptured (the runtime's, the driver's)
RECAPTURED = {"n13_r1": 1, "n13_r2": 2, "n13_dr1": 1, "n13_dr2": 2}
CUDA13_FAIL = "cuGraphAddNode_v3=1x1,cuCtxSynchronize_v2=201x1"  # each one's first call
CUDA13_CTX_SYNCS = 3  # cuCtxSynchronize_v2 (CUDA 13.0) that succeeded


NVCC_13 = {("runtime", "n13_nvcc"): 5}  # graphs13 --launches: nvcc 13's <<<>>> launches

Scraped = tuple[list[Series], list[Series], list[Series], list[Series]]
# graphs, graphs --follow, graphs13, graphs13 --launches


def graph_launches(series: list[Series]) -> dict[tuple[str, str], float]:
    return {(x.labels["cuda_api"], x.labels["cuda_kernel_name"]): x.value
            for x in find(series, "gpu_kernel_launch_calls_total")}


@pytest.fixture(scope="module")
def scraped(cuda_build: Build) -> Iterator[Scraped]:
    """The series of `graphs`, of `graphs --follow` and of `graphs13`, from one exporter."""
    args = [*only_ebpf_args(), "--collector.ebpf", "--ebpf.rescan-interval=0.2",
            "--ebpf.pid-label"]
    with exporter(args) as exp:
        w = Workload([cuda_build.path("graphs")],
                     {"FAKE_CUDA_FAIL": "cuStreamEndCapture=901x1"})
        f = Workload([cuda_build.path("graphs"), "--follow"], {"FAKE_CUDA_FAIL": FOLLOW_FAIL})
        c13 = Workload([cuda_build.path("graphs13")], {"FAKE_CUDA_FAIL": CUDA13_FAIL})
        nvcc13 = Workload([cuda_build.path("graphs13"), "--launches"])
        wait_attached(exp, cuda_build.dir)
        wait_until(lambda: f"{cuda_build.dir}/libcudart.so.13" in attached(exp),
                   "probes on libcudart.so.13")
        w.go()
        f.go()
        c13.go()
        nvcc13.go()
        pids = str(w.proc.pid), str(f.proc.pid), str(c13.proc.pid), str(nvcc13.proc.pid)

        def done() -> bool:
            series = parse(exp.scrape())
            last = ((pids[0], "graph", "k_f", 1), (pids[1], "graph", "f_last", 1),
                    (pids[2], "graph", "n13_last", 1), (pids[3], "runtime", "n13_nvcc", 5))
            return all(graph_launches(find(series, "gpu_kernel_launch_calls_total",
                                           process_pid=pid)).get((api, k)) == n
                       for pid, api, k, n in last)

        wait_until(done, "graph launches counted")
        text = exp.scrape()
    promtool_check_metrics(text)
    series = parse(text)

    def of(pid: str) -> list[Series]:
        return [x for x in series if x.labels.get("process_pid") in (pid, None)]

    yield of(pids[0]), of(pids[1]), of(pids[2]), of(pids[3])


@pytest.fixture(scope="module")
def series(scraped: Scraped) -> list[Series]:
    return scraped[0]


@pytest.fixture(scope="module")
def followed(scraped: Scraped) -> list[Series]:
    return scraped[1]


@pytest.fixture(scope="module")
def cuda13(scraped: Scraped) -> list[Series]:
    return scraped[2]


@pytest.fixture(scope="module")
def nvcc13(scraped: Scraped) -> list[Series]:
    return scraped[3]


def test_nvcc_13s_launches_by_kernel_handle_are_counted_by_name(nvcc13: list[Series]) -> None:
    """__cudaLaunchKernel jumps to cudaLaunchKernel, whose name the runtime's string table
    keeps only as the tail of `__cudaLaunchKernel`: found there, probed, counted."""
    assert graph_launches(nvcc13) == NVCC_13


def test_each_graph_launch_counts_each_kernel_node_under_its_name(series: list[Series]
                                                                  ) -> None:
    assert graph_launches(series) == {**{("graph", k): n for k, n in GRAPH.items()}, **RUN}


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


def _launched(series: list[Series], kernels: dict[str, int]) -> dict[str, float]:
    got = graph_launches(series)
    assert {api for api, _ in got} == {"graph"}, got  # no kernel ran outside a graph
    return {k: n for (_, k), n in got.items() if k in kernels}


def test_a_cloned_graph_runs_the_kernels_the_original_had_then(followed: list[Series]
                                                                ) -> None:
    assert _launched(followed, CLONED) == CLONED


def test_an_updated_executable_graph_counts_old_kernels_before_and_new_after(
        followed: list[Series]) -> None:
    assert _launched(followed, UPDATED) == UPDATED


def test_a_child_graph_adds_the_kernels_it_had_when_added(followed: list[Series]) -> None:
    assert _launched(followed, {**CHILDREN, "ch_late": 0}) == CHILDREN


def test_nodes_added_by_add_node_v2_are_followed(followed: list[Series]) -> None:
    assert _launched(followed, ADDED_V2) == ADDED_V2


def test_nodes_added_by_cuda_13s_add_node_are_followed(cuda13: list[Series]) -> None:
    """Every kernel node known by name: none read from the 5th argument (the count)."""
    assert _launched(cuda13, ADDED_13) == ADDED_13


def test_a_kernel_node_given_by_its_handle_is_named(cuda13: list[Series]) -> None:
    assert _launched(cuda13, BY_HANDLE_13) == BY_HANDLE_13


def test_nodes_added_by_the_drivers_add_node_v3_are_followed(cuda13: list[Series]) -> None:
    assert _launched(cuda13, ADDED_V3) == ADDED_V3


def test_a_recaptured_graph_runs_the_kernels_of_its_recapture(cuda13: list[Series]) -> None:
    """The launches during a recapture are nodes, not runs (_launched: no launch outside a
    graph), and they replace the graph's kernel nodes."""
    assert _launched(cuda13, RECAPTURED) == RECAPTURED


def test_every_cuda_13_graph_launch_is_named(cuda13: list[Series]) -> None:
    assert graph_launches(cuda13) == {("graph", k): n for k, n in
                                      {**ADDED_13, **BY_HANDLE_13, **ADDED_V3,
                                       **RECAPTURED}.items()}


def test_cuda_13s_context_synchronise_is_counted_and_failures_are_errors(
        cuda13: list[Series]) -> None:
    syncs = {x.labels["cuda_sync_call"]: x.value
             for x in find(cuda13, "gpu_sync_duration_seconds_count")}
    assert syncs.get("cuCtxSynchronize") == CUDA13_CTX_SYNCS
    errors = {(x.labels["cuda_call"], x.labels["error_type"]): x.value
              for x in find(cuda13, "gpu_cuda_errors_total")}
    assert errors == {("cuGraphAddNode", "CUDA_ERROR_INVALID_VALUE"): 1,
                      ("cuCtxSynchronize", "CUDA_ERROR_INVALID_CONTEXT"): 1}


def test_every_followed_graph_launch_is_named(followed: list[Series]) -> None:
    """Nothing left over as unknown: every kernel node of every launch is known."""
    assert graph_launches(followed) == {("graph", k): n for k, n in FOLLOWED.items()}


def test_failed_clones_and_updates_are_errors_and_change_nothing(followed: list[Series]
                                                                  ) -> None:
    errors = {(x.labels["cuda_call"], x.labels["error_type"]): x.value
              for x in find(followed, "gpu_cuda_errors_total")}
    assert errors == {("cudaGraphClone", "cudaErrorMemoryAllocation"): 1,
                      ("cudaGraphExecUpdate", "cudaErrorGraphExecUpdateFailure"): 1}
    # what they would have changed: c_kept's graph, u_new's executable graph
    assert _launched(followed, {"c_kept": 1, "u_new": 8}) == {"c_kept": 1, "u_new": 8}


def test_an_exited_process_is_held_until_its_graph_events_are_read(cuda_build: Build
                                                                   ) -> None:
    """A process exits with graph launches whose executable graphs' events the event
    loop has not read yet (a busy loop, a slow machine). However many reads come first,
    its launches wait for those events, and are then counted by name, exactly: never
    given up as unknown while the events are there to read."""
    with engine() as e:
        w = Workload([cuda_build.path("graphs")], {"FAKE_CUDA_FAIL": "cuStreamEndCapture=901x1"})
        e.rescan()
        e.events.stop()  # the event loop stops: nothing reads the events from here on

        def by_name() -> dict[str, int]:
            return {x.kernel_name: x.count for x in e.read().launches
                    if x.pid == w.proc.pid and x.api == "graph"}

        w.go()
        for _ in range(10):  # the exited process is held back whole: its name is unread
            assert by_name() == {}  # too (its events carry it), and no read saw it alive
            time.sleep(0.05)
        e.pump(0)
        e.pump(0)
        assert by_name() == GRAPH
