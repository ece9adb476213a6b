"""eBPF drills with real uprobes on the fake CUDA libraries (tests/ebpf builds them):
a traced process killed in the middle of its calls, 1,000 short-lived processes, 1,000
HIP processes mapping libamdhip64 at once, and a
process that launches more distinct kernels than the counter map holds, one that
builds more CUDA graphs than are kept, one that builds more graphs than the event buffer
holds while the exporter is stopped, and one that updates an executable graph more
times than executable graphs are kept. tests/ebpf
covers SIGTERM detaching every probe and the drop counters being exported; these are
the rest of the issue's eBPF drills. Needs root, bcc and kernel headers, as CI has.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.sources.ebpf.names import EXECUTABLES_MAX
from tests.ebpf.conftest import (
    HIP_LIB,
    Build,
    Workload,
    attached,
    copy_program,
    only_ebpf_args,
    wait_attached,
    wait_until,
)
from tests.helpers import Exporter, Series, eventually, exporter, find, parse

SHORT_LIVED, LAUNCHES_EACH = 1000, 3
HIP_CROWD, HIP_CROWD_LAUNCHES = 1000, 5  # HIP processes mapping the library at once
FLOOD_KERNELS = 70_000  # distinct kernels in one process, past the 65,536-entry map
GRAPH_FLOOD = abi.GRAPHS_MAX + 1000  # one-kernel graphs in one process, past the cap
# More one-kernel graphs than the event buffer holds: 176 bytes of events each (create,
# node, instantiate, the launch's new key), 4 MiB hold about 23,800.
LOSSY_FLOOD = 30_000
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
        # In its loop of probed calls (counted): nearly all its time is inside one.
        eventually(lambda: launches(_healthy(exp), "killed_mid") > 0, 30,
                   "the victim's launches counted")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        first = launches(_healthy(exp), "killed_mid")
        assert first > 0
        # Folded into the exporter's own totals once the process is gone: stable, and
        # not lost when its map entries are freed.
        assert launches(_healthy(exp), "killed_mid") == first
        # Probes keep working for the next process, which is counted exactly.
        run_launch_loop(after, 7)
        # A process that has exited is reported once the event loop has read its events
        # (the hold-back of exited processes), which a loaded machine may delay a scrape.
        eventually(lambda: launches(_healthy(exp), "after_kill") == 7, 30,
                   "the next process's 7 launches")
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


def test_thousand_processes_mapping_the_hip_library_at_once(hip_build: Build) -> None:
    """Issue #23's bad input: 1,000 processes mapping libamdhip64 at the same time (the
    fake, built by hipcc). The file is probed once; every launch of every process is
    counted, exactly; nothing a map must hold at this size is dropped, and what the
    burst of execs and mappings overflows (the process event buffer) is counted, never
    fatal; the exporter stays healthy, and the library is detached once they and the
    holder have exited."""
    exe = copy_program(hip_build, "hip_many", "hip_thousand")
    lib = hip_build.path(HIP_LIB)
    args = [*only_ebpf_args(), "--collector.ebpf", "--ebpf.rescan-interval=0.2",
            "--scrape.timeout=30"]
    with exporter(args) as exp:
        holder = Workload([hip_build.path("hip_launch_loop"), "hip", "0"])
        crowd: list[subprocess.Popen[bytes]] = []
        read_end, write_end = os.pipe()
        try:
            wait_until(lambda: lib in attached(exp), f"probes on {lib}")
            # All of them block reading the one pipe: released together when it closes.
            for _ in range(HIP_CROWD):
                crowd.append(subprocess.Popen([exe, str(HIP_CROWD_LAUNCHES)], stdin=read_end,
                                              stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL))
            os.close(read_end)
            read_end = -1
            # Scraped while all of them map the library: healthy, the file probed once.
            assert attached(exp) >= {lib}
            _healthy(exp)
            os.close(write_end)
            write_end = -1
            deadline = time.monotonic() + 120
            for p in crowd:
                assert p.wait(max(1.0, deadline - time.monotonic())) == 0
        finally:
            for fd in (read_end, write_end):
                if fd >= 0:
                    os.close(fd)
            for p in crowd:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            holder.proc.kill()
            holder.proc.wait()
        want = HIP_CROWD * HIP_CROWD_LAUNCHES
        eventually(lambda: launches(_healthy(exp), "hip_thousand") == want, 60,
                   f"the crowd's {want} launches")
        series = _healthy(exp)
        for reason in ("stats_map_full", "threads_map_full", "pending_map_full",
                       "event_buffer_full"):
            assert dropped(series, reason) == 0, reason
        print("process events dropped in the burst:",
              dropped(series, "process_event_buffer_full"))
        assert find(series, "gpu_exporter_ebpf_events_dropped_total",
                    reason="process_event_buffer_full")
        # Every process gone: the file's probes are detached (within two rescans).
        eventually(lambda: lib not in attached(exp), 60, f"{lib} detached")
        assert launches(_healthy(exp), "hip_thousand") == want


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


def graph_launches(exp: Exporter, exe: str) -> dict[str, float]:
    return {s.labels["cuda_kernel_name"]: s.value for s in find(
        _healthy(exp), "gpu_kernel_launch_calls_total", cuda_api="graph",
        process_executable_name=exe)}


def wait_first_launch(exp: Exporter, exe: str) -> None:
    """Until the launch a `graphs --flood N --wait` process makes before waiting is
    counted, named: the exporter has seen the process (and read its maps)."""
    wait_until(lambda: [s.value for s in find(
        _healthy(exp), "gpu_kernel_launch_calls_total", cuda_kernel_name="k_d",
        process_executable_name=exe, cuda_api="runtime")] == [1],
        f"{exe}'s first launch, named")


def test_graphs_past_the_caps_are_counted_unknown_never_lost(cuda_build: Build) -> None:
    """A process builds and launches more one-kernel graphs than are kept, as fast as the
    probes let it, and exits. Its events (about 0.9 MB) fit in the event buffer whole
    however far behind the event loop is (a busy node), and its maps were read at its
    first event: none is lost, and every graph kept is named, exactly."""
    flood = copy_program(cuda_build, "graphs", "graph_flood")
    with probed(cuda_build) as exp:
        res = subprocess.run([flood, "--flood", str(GRAPH_FLOOD)], capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 0 and res.stdout == "done\n", res.stderr
        # Every graph launch is counted, under its kernel's name or as unknown.
        wait_until(lambda: sum(graph_launches(exp, "graph_flood").values()) == GRAPH_FLOOD,
                   "every graph launch")
        got = graph_launches(exp, "graph_flood")
        series = _healthy(exp)
    assert dropped(series, "graph_event_buffer_full") == 0
    assert dropped(series, "graph_map_full") == 0  # the kernel's map holds them all
    # The first GRAPHS_MAX graphs and executable graphs are kept; each one past the cap
    # is dropped twice (its graph, its executable graph) and runs as unknown.
    assert got == {"k_d": abi.GRAPHS_MAX, "unknown": GRAPH_FLOOD - abi.GRAPHS_MAX}
    assert dropped(series, "graph_nodes_full") == 2 * (GRAPH_FLOOD - abi.GRAPHS_MAX)


def test_graph_events_lost_are_counted_and_the_rest_named(cuda_build: Build) -> None:
    """The exporter stopped (SIGSTOP: its event loop starved) while a process builds and
    launches more graphs than the event buffer holds: the loss is counted
    (graph_event_buffer_full), every graph launch is counted, and the graphs whose events
    were read (the buffer's first GRAPHS_MAX) are named; only the rest are unknown."""
    flood = copy_program(cuda_build, "graphs", "graph_lossy")
    with probed(cuda_build) as exp:
        w = Workload([flood, "--flood", str(LOSSY_FLOOD)])
        try:
            wait_first_launch(exp, "graph_lossy")
            exp.proc.send_signal(signal.SIGSTOP)
            try:
                w.go(timeout=120)
            finally:
                exp.proc.send_signal(signal.SIGCONT)
        finally:
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()
        wait_until(lambda: sum(graph_launches(exp, "graph_lossy").values()) == LOSSY_FLOOD,
                   "every graph launch", timeout=60)
        got = graph_launches(exp, "graph_lossy")
        series = _healthy(exp)
    assert dropped(series, "graph_event_buffer_full") > 0
    assert got == {"k_d": abi.GRAPHS_MAX, "unknown": LOSSY_FLOOD - abi.GRAPHS_MAX}


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


NAMES, NAME_LAUNCHES = 1500, 3  # distinct executables, launches of each
# What the exporter's RSS may grow by over the 1,500 names (docs/hostile-input.md).
NAMES_RSS_GROWTH_MIB = 48


def _rss_kib(pid: int, key: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def test_1500_executable_names_keep_the_page_under_10000_series(cuda_build: Build) -> None:
    """Issue #32: 6,003 short-lived processes, each of its own executable name, took the
    eBPF families from 963 to 212,170 series. 1,500 here (hard links of one program under
    1,500 names, beside its libraries: it finds them at $ORIGIN), 8 at a time: the first
    names (up to --ebpf.executable-names-max) keep series of their own, the rest are
    `other`, counted; every launch is counted once; the page stays under 10,000 series
    and is answered every scrape."""
    programs = []
    for i in range(NAMES):
        path = cuda_build.dir / f"job-{i:04d}"
        if not path.exists():
            os.link(cuda_build.path("launch_loop"), path)
        programs.append(str(path))
    with probed(cuda_build) as exp:  # the default cap
        _healthy(exp)
        idle = _rss_kib(exp.proc.pid)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda p: run_launch_loop(p, NAME_LAUNCHES), programs))
        want = NAMES * NAME_LAUNCHES

        def counted() -> float:
            series = _healthy(exp)
            return sum(s.value for s in find(series, "gpu_kernel_launch_calls_total")
                       if s.labels["process_executable_name"].startswith(("job-", "other")))

        eventually(lambda: counted() == want, 60, f"the {want} launches")
        text = exp.scrape()
        series = parse(text)
        names = {s.labels["process_executable_name"]
                 for s in find(series, "gpu_kernel_launch_calls_total")}
        own = {n for n in names if n.startswith("job-")}
        assert 0 < len(own) <= EXECUTABLES_MAX and "other" in names
        [folded] = find(series, "gpu_exporter_ebpf_executables_folded_total")
        assert folded.value == NAMES - len(own)
        assert launches(series, "other") == folded.value * NAME_LAUNCHES
        rss = _rss_kib(exp.proc.pid)
        print(f"\n{len(series)} series, {len(text)} bytes, {len(own)} names of their own, "
              f"{folded.value:.0f} processes folded, RSS {idle // 1024} -> {rss // 1024} MiB")
        assert len(series) < 10_000
        assert rss - idle < NAMES_RSS_GROWTH_MIB * 1024
        assert counted() == want  # the next scrape the same: nothing lost, nothing twice
