"""HIP kernel durations bounded by completion points (issue #27's, at parity for HIP, issue
#23): programs built by the real hipcc (tests/ebpf/csrc/hip_completion.hip) run on the
fake libamdhip64's simulated GPU clock (FAKE_HIP_KERNEL_NS: each kernel 20 ms of GPU
time, k_first 2 s); the real exporter's uprobes on hipEventRecord, hipEventQuery,
hipStreamQuery(_spt), hipEventSynchronize, hipStreamWaitEvent, hipEventElapsedTime and
hipEventDestroy bound each launch, labelled by what bounded it, never below its simulated
time. Counts are filtered by the workloads' own process ids (other GPU programs may run
on the machine)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ebpf.conftest import HIP_LIB, Build, Workload, attached, copy_program, only_ebpf_args
from tests.ebpf.test_completion import Run  # the same reading of a scrape as CUDA's
from tests.helpers import eventually, exporter, find, parse, promtool_check_metrics

LOOPS = 3
WAIT_LOOPS = 2
KERNEL_S = 0.020
FIRST_S = 2.0
SIMULATED = {"FAKE_HIP_KERNEL_NS": f"k_first={int(FIRST_S * 1e9)},"
                                   f"k_stale={int(FIRST_S * 1e9)},k_={int(KERNEL_S * 1e9)},"
                                   f"q_kernel={int(KERNEL_S * 1e9)},t_spt={int(KERNEL_S * 1e9)},"
                                   f"m_poll={int(KERNEL_S * 1e9)}"}
BELOW_KERNEL = 2**24 * 1e-9  # 16.8 ms: a bucket bound just below the kernels' 20 ms
SLACK_S = 1.0  # per sample, on average: a loaded 2-core machine delays the polling thread
EXE = "hip_compl"

EXPECTED = {
    # k_polled: its event polled ready (hipEventQuery); k_front, k_timed: the
    # hipEventSynchronize of the event recorded after them; k_late (null stream), k_waiter
    # (stream B): only hipDeviceSynchronize covers them.
    "issue": {("k_polled", "event"): LOOPS, ("k_front", "event"): LOOPS,
              ("k_timed", "event"): LOOPS, ("k_late", "sync_fallback"): LOOPS,
              ("k_waiter", "sync_fallback"): LOOPS},
    "stream_query": {("q_kernel", "event"): LOOPS},
    # hipLaunchKernel_spt with a NULL stream launches on the thread's own stream, which
    # hipStreamQuery(hipStreamPerThread) polls; hipStreamQuery_spt(NULL) is that stream
    # too, not the null stream's k_null (only the device synchronise covers it).
    "per_thread": {("t_spt", "event"): LOOPS, ("k_null", "sync_fallback"): 1},
    "waits": {("k_first", "event"): WAIT_LOOPS, ("k_after", "event"): WAIT_LOOPS},
    "elapsed": {("k_el", "event"): LOOPS},
    "module": {("m_poll", "event"): LOOPS},
    # an event destroyed before it was queried bounds nothing
    "destroyed": {("k_gone", "sync_fallback"): 1},
    # k_stale (2 s) left running on a stream destroyed (hipStreamDestroy) whose handle the
    # next stream is given: k_fresh there is bounded by its own event, not grouped with
    # k_stale, which waits for the device synchronise
    "reuse": {("k_stale", "sync_fallback"): WAIT_LOOPS, ("k_fresh", "event"): WAIT_LOOPS},
}


@pytest.fixture(scope="module")
def run(hip_build: Build) -> Iterator[Run]:
    program = copy_program(hip_build, "hip_completion", EXE)
    args = [*only_ebpf_args(), "--collector.ebpf", "--ebpf.rescan-interval=0.2",
            "--ebpf.pid-label"]
    loops = {"issue": LOOPS, "stream_query": LOOPS, "per_thread": LOOPS, "waits": WAIT_LOOPS,
             "elapsed": LOOPS, "module": LOOPS, "destroyed": 1, "reuse": WAIT_LOOPS}
    with exporter(args) as exp:
        work = {mode: Workload([program, mode, str(n)], env=SIMULATED)
                for mode, n in loops.items()}
        lib = hip_build.path(HIP_LIB)
        eventually(lambda: lib in attached(exp), 60, f"probes on {lib}")
        for w in work.values():
            w.go()
        pids = {name: str(w.proc.pid) for name, w in work.items()}

        def complete() -> Run:
            text = exp.scrape()
            r = Run(text, parse(text), pids)
            for mode, want in EXPECTED.items():
                assert r.durations(mode, "count") == want, mode
            assert find(r.series, "gpu_kernel_elapsed_seconds_count", process_pid=pids["elapsed"])
            assert find(r.series, "gpu_stream_wait_bound_seconds_count",
                        process_pid=pids["waits"])
            return r

        # The last samples are counted once the event loop has read the kernels' names.
        yield eventually(complete, 60, "every HIP launch's duration sample")


def test_every_covered_hip_launch_gets_one_sample_labelled_by_its_completion(run: Run) -> None:
    promtool_check_metrics(run.text)
    for mode, want in EXPECTED.items():
        assert run.durations(mode, "count") == want, mode


def test_no_hip_bound_below_the_simulated_gpu_time(run: Run) -> None:
    for mode, want in EXPECTED.items():
        for kernel, _ in want:
            assert run.bucket(mode, kernel, BELOW_KERNEL) == 0, (mode, kernel)
    sums = run.durations("issue", "sum")
    assert sums[("k_polled", "event")] >= LOOPS * KERNEL_S
    # k_front and k_timed share one bound, from k_front's launch: both ran in it.
    assert sums[("k_front", "event")] >= LOOPS * 2 * KERNEL_S
    assert sums[("k_timed", "event")] == sums[("k_front", "event")]
    assert sums[("k_late", "sync_fallback")] >= LOOPS * KERNEL_S
    assert run.durations("waits", "sum")[("k_first", "event")] >= WAIT_LOOPS * FIRST_S


def test_a_destroyed_hip_streams_handle_given_again_starts_afresh(run: Run) -> None:
    sums = run.durations("reuse", "sum")
    assert sums[("k_stale", "sync_fallback")] >= WAIT_LOOPS * FIRST_S
    assert sums[("k_fresh", "event")] < WAIT_LOOPS * FIRST_S / 2
    assert not find(run.series, "gpu_cuda_errors_total", process_pid=run.pids["reuse"])


def test_tight_hip_polling_bounds_closely(run: Run) -> None:
    for mode, kernel in (("issue", "k_polled"), ("stream_query", "q_kernel"),
                         ("per_thread", "t_spt"), ("module", "m_poll")):
        total = run.durations(mode, "sum")[(kernel, "event")]
        assert LOOPS * KERNEL_S <= total <= LOOPS * (KERNEL_S + SLACK_S), (mode, total)


def test_hip_not_ready_answers_are_not_errors(run: Run) -> None:
    # hipErrorNotReady (600) answered the polls: not an error. (The destroyed event's
    # query is the fake's success: no error either.)
    assert find(run.series, "gpu_cuda_errors_total", process_executable_name=EXE) == []


def test_a_hip_cross_stream_wait_is_not_counted_as_the_waiting_kernels_work(run: Run) -> None:
    # k_after (20 ms) on B waits (hipStreamWaitEvent) for eA, recorded after k_first (2 s)
    # on A; eA's not-ready answers bound k_after's start.
    assert run.bucket("waits", "k_after", BELOW_KERNEL) == 0
    assert run.durations("waits", "sum")[("k_after", "event")] < WAIT_LOOPS * FIRST_S / 2
    pid = run.pids["waits"]
    assert [x.value for x in find(run.series, "gpu_stream_waits_total",
                                  process_pid=pid)] == [WAIT_LOOPS]
    (total,) = [x.value for x in find(run.series, "gpu_stream_wait_bound_seconds_sum",
                                      process_pid=pid)]
    assert WAIT_LOOPS * FIRST_S * 0.99 <= total <= WAIT_LOOPS * (FIRST_S + SLACK_S)


def test_hip_elapsed_time_of_a_one_kernel_span_is_that_kernels_time(run: Run) -> None:
    pid = run.pids["elapsed"]
    counts = {x.labels["cuda_kernel_name"]: x.value
              for x in find(run.series, "gpu_kernel_elapsed_seconds_count", process_pid=pid)}
    assert counts == {"k_el": LOOPS}
    (total,) = [x.value for x in find(run.series, "gpu_kernel_elapsed_seconds_sum",
                                      process_pid=pid)]
    assert LOOPS * KERNEL_S * 0.999 <= total <= LOOPS * (KERNEL_S + SLACK_S)
