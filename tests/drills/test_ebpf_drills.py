"""eBPF drills with real uprobes on the fake CUDA libraries (tests/ebpf builds them):
a traced process killed in the middle of its calls, 1,000 short-lived processes, and a
process that launches more distinct kernels than the counter map holds, one that
builds more CUDA graphs than are kept, and one that updates an executable graph more
times than executable graphs are kept. tests/ebpf
covers SIGTERM detaching every probe and the drop counters being exported; these are
the rest of the issue's eBPF drills. Needs root, bcc and kernel headers, as CI has.
"""

from __future__ import annotations

import concurrent.futures
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

from gpu_exporter.ebpf import abi
from tests.ebpf.conftest import (
    Build,
    Workload,
    copy_program,
    only_ebpf_args,
    wait_attached,
    wait_until,
)
from tests.helpers import Exporter, Series, exporter, find, parse

SHORT_LIVED, LAUNCHES_EACH = 1000, 3
FLOOD_KERNELS = 70_000  # distinct kernels in one process, past the 65,536-entry map
GRAPH_FLOOD = abi.GRAPHS_MAX + 1000  # one-kernel graphs in one process, past the cap
# Steps of the update loop (graphs --updates): updates and re-instantiations each past
# the cap of executable graphs kept per process, in chunks small enough for the event
# buffer.
UPDATE_CHUNKS, UPDATE_STEPS = 18, 500


@contextmanager
def probed(build: Build, *extra: str) -> Iterator[Exporter]:
    """The exporter with only the eBPF collector, probes attached to `build`'s
    libraries (a process has to map them for the scanner to find them)."""
    args = [*only_ebpf_args(), "--collector.ebpf", "--ebpf.rescan-interval=0.2",
            "--scrape.timeout=30", *extra]
    with exporter(args) as exp:
        holder = Workload([build.path("launch_loop"), "runtime", "0"])
        try:
            wait_attached(exp, build.dir)
            yield exp
        finally:
            holder.proc.kill()
            holder.proc.wait()


def launches(series: list[Series], exe: str) -> float:
    return sum(s.value for s in find(series, "gpu_kernel_launch_calls_total",
                                     process_executable_name=exe))


def dropped(series: list[Series], reason: str) -> float:
    return sum(s.value for s in find(series, "gpu_exporter_ebpf_events_dropped_total",
                                     reason=reason))


def run_launch_loop(path: str, n: int) -> None:
    proc = subprocess.Popen([path, "runtime", str(n)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate("go\n", timeout=60)
    assert proc.returncode == 0 and out.startswith("ready"), (proc.returncode, out, err)


def _healthy(exp: Exporter) -> list[Series]:
    series = parse(exp.scrape())
    assert [s.value for s in find(series, "gpu_exporter_collector_success",
                                  collector="ebpf")] == [1.0]
    assert exp.proc.poll() is None
    return series


def test_process_killed_mid_call(cuda_build: Build) -> None:
    victim = copy_program(cuda_build, "launch_loop", "killed_mid")
    after = copy_program(cuda_build, "launch_loop", "after_kill")
    with probed(cuda_build) as exp:
        proc = subprocess.Popen([victim, "runtime", "100000000"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.stdin.write("go\n")
        proc.stdin.flush()
        time.sleep(1.0)  # a loop of probed calls: nearly all its time is inside one
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        first = launches(_healthy(exp), "killed_mid")
        assert first > 0
        # Folded into the exporter's own totals once the process is gone: stable, and
        # not lost when its map entries are freed.
        assert launches(_healthy(exp), "killed_mid") == first
        # Probes keep working for the next process, which is counted exactly.
        run_launch_loop(after, 7)
        assert launches(_healthy(exp), "after_kill") == 7
        assert "eBPF event loop" not in exp.logs()


def test_thousand_short_lived_processes(cuda_build: Build) -> None:
    exe = copy_program(cuda_build, "launch_loop", "short_lived")
    with probed(cuda_build) as exp:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: run_launch_loop(exe, LAUNCHES_EACH), range(SHORT_LIVED)))
        series = _healthy(exp)
        # Every launch of every process counted once, though all have exited.
        assert launches(series, "short_lived") == SHORT_LIVED * LAUNCHES_EACH
        assert dropped(series, "stats_map_full") == 0
        # Their map entries were folded and freed: the next scrape is the same.
        assert launches(_healthy(exp), "short_lived") == SHORT_LIVED * LAUNCHES_EACH


def test_counter_map_filled_past_capacity(cuda_build: Build) -> None:
    flood = copy_program(cuda_build, "driver_only", "kernel_flood")
    after = copy_program(cuda_build, "launch_loop", "after_flood")
    with probed(cuda_build) as exp:
        res = subprocess.run([flood, "names", str(FLOOD_KERNELS)], capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        series = _healthy(exp)
        counted = launches(series, "kernel_flood")
        lost = dropped(series, "stats_map_full")
        # Past capacity: launches were dropped, and counted as dropped, never silently.
        assert lost > 0
        assert counted < FLOOD_KERNELS
        assert counted + lost >= FLOOD_KERNELS, (counted, lost)
        # The names past the cap are "other", with the overflow counted.
        names = {s.labels["cuda_kernel_name"] for s in find(
            series, "gpu_kernel_launch_calls_total", process_executable_name="kernel_flood")}
        assert "other" in names and len(names) <= 502  # 500 names, other, unknown
        # The dead process's entries were freed: the map has room again.
        run_launch_loop(after, 5)
        series = _healthy(exp)
        assert launches(series, "after_flood") == 5
        assert dropped(series, "stats_map_full") == lost


def test_graphs_past_the_caps_are_counted_unknown_never_lost(cuda_build: Build) -> None:
    flood = copy_program(cuda_build, "graphs", "graph_flood")
    with probed(cuda_build) as exp:
        res = subprocess.run([flood, "--flood", str(GRAPH_FLOOD)], capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 0 and res.stdout == "done\n", res.stderr

        def by_name() -> dict[str, float]:
            return {s.labels["cuda_kernel_name"]: s.value for s in find(
                _healthy(exp), "gpu_kernel_launch_calls_total", cuda_api="graph",
                process_executable_name="graph_flood")}

        # Every graph launch is counted, under its kernel's name or as unknown.
        wait_until(lambda: sum(by_name().values()) == GRAPH_FLOOD, "every graph launch")
        got = by_name()
        series = _healthy(exp)
    assert set(got) == {"k_d", "unknown"}, got
    kept, lost = dropped(series, "graph_nodes_full"), dropped(series, "graph_event_buffer_full")
    assert dropped(series, "graph_map_full") == 0  # the kernel's map holds them all
    if lost == 0:
        # The first GRAPHS_MAX graphs and executable graphs are kept; each one past the
        # cap is dropped twice (its graph, its executable graph) and runs as unknown.
        assert got["k_d"] == abi.GRAPHS_MAX
        assert kept == 2 * (GRAPH_FLOOD - abi.GRAPHS_MAX)
    else:
        # Events lost to a full ring buffer make what was being built unknown too.
        assert got["k_d"] < abi.GRAPHS_MAX and kept > 0, (got, kept, lost)


def test_an_executable_graph_updated_every_step_stays_named_and_bounded(cuda_build: Build
                                                                         ) -> None:
    """A serving loop's pattern: each step captures a graph, updates the executable graph
    to it (a new serial each time) or destroys and instantiates it again, launches it and
    destroys the graph. More steps of each kind than executable graphs are kept: the
    retired serials are folded and forgotten, so every launch is counted under its
    kernel's name, exactly, and nothing is dropped."""
    loop = copy_program(cuda_build, "graphs", "update_loop")
    with probed(cuda_build) as exp:
        proc = subprocess.Popen([loop, "--updates", str(UPDATE_CHUNKS), str(UPDATE_STEPS)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            assert proc.stdout.readline() == "ready\n"
            wait_attached(exp, cuda_build.dir)

            def by_name() -> dict[str, float]:
                return {s.labels["cuda_kernel_name"]: s.value for s in find(
                    _healthy(exp), "gpu_kernel_launch_calls_total", cuda_api="graph",
                    process_executable_name="update_loop")}

            for chunk in range(1, UPDATE_CHUNKS + 1):
                proc.stdin.write("go\n")
                proc.stdin.flush()
                assert proc.stdout.readline() == "chunk\n"
                half = chunk * UPDATE_STEPS // 2
                wait_until(lambda h=half: by_name() == {"u_old": h, "u_new": h},
                           f"chunk {chunk} counted by name")
            assert proc.wait(timeout=10) == 0
            # Folded once: the exited process's counters are read again across the event
            # loop's turns (0.1 s each, as long as an exited process may be held back),
            # none a second time.
            deadline = time.monotonic() + 1
            while time.monotonic() < deadline:
                assert by_name() == {"u_old": half, "u_new": half}
            series = _healthy(exp)
        finally:
            proc.kill()
            proc.wait()
    for reason in ("graph_nodes_full", "graph_map_full", "graph_event_buffer_full",
                   "stats_map_full"):
        assert dropped(series, reason) == 0, reason
