"""The real exporter attaches real uprobes to the fake CUDA libraries; real workload
processes (threads, several processes, one started after the exporter with its own copy
of the libraries, a driver-only one, a graph launch) run; one scrape is checked to the
exact count. Needs root, bcc and kernel headers: as CI has them, their absence fails."""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ebpf.conftest import (
    Build,
    Workload,
    attached,
    copy_program,
    only_ebpf_args,
    wait_attached,
    wait_until,
)
from tests.fake_nvml import scenario as fake
from tests.helpers import (
    EXPORTER,
    Series,
    eventually,
    exporter,
    find,
    parse,
    promtool_check_metrics,
    run_cli,
    value,
)

NAMES_MAX = 12
RUNTIME_N = 5
THREADS, PER_THREAD = 4, 50
DRIVER_N = 7
MANY_NAMES = 30


@dataclass(frozen=True)
class Scenario:
    text: str
    series: list[Series]
    late_dir: Path
    pids: frozenset[str]  # of this scenario's workloads (others may run on a dev machine)
    # The libraries probed while the workloads ran: a file is detached two rescans after
    # its last process exits, which on a loaded machine may come before the last scrape.
    attached: frozenset[str]

    def ours(self, name: str, **labels: str) -> list[Series]:
        """Series of `name` from this scenario's processes only."""
        return [x for x in find(self.series, name, **labels)
                if x.labels.get("process_pid") in self.pids]


@pytest.fixture(scope="module")
def scenario(cuda_build: Build, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    rt = copy_program(cuda_build, "workload", "wl_runtime")
    th = copy_program(cuda_build, "workload", "wl_threads")
    un = copy_program(cuda_build, "workload", "wl_unknown")
    drv = cuda_build.path("driver_only")
    names = copy_program(cuda_build, "driver_only", "drv_names")
    static = cuda_build.path("wl_static")
    # A "container": a private mount namespace whose tmpfs holds its own copies of the
    # program and libraries, invisible under that path from the host.
    ctr_dir = tmp_path_factory.mktemp("container")
    b = cuda_build.dir
    in_ctr = (f"mount -t tmpfs tmpfs {ctr_dir} && cp {b}/libcuda.so.1 {b}/libcudart.so.12 "
              f"{ctr_dir}/ && cp {b}/workload {ctr_dir}/wl_ctr && "
              f"exec {ctr_dir}/wl_ctr runtime 1 --wait")
    unshare = shutil.which("unshare")
    assert unshare, "unshare (util-linux) is missing"
    # With process_pid, so the families without an executable label (synchronise calls,
    # kernel durations) can be told apart from other CUDA programs on the machine.
    args = [*only_ebpf_args(), "--collector.ebpf", f"--ebpf.kernel-names-max={NAMES_MAX}",
            "--ebpf.rescan-interval=0.2", "--ebpf.pid-label"]
    # NVML present but its driver not loaded: no call has a device label, and a feature
    # state says why.
    nvml = fake.Scenario(init_error="DRIVER_NOT_LOADED").write(
        tmp_path_factory.mktemp("nvml") / "gpus.scenario")
    with exporter(args, env=fake.env(fake.build(), nvml)) as exp:
        first = [Workload([rt, "runtime", str(RUNTIME_N)]),
                 Workload([th, "threads", str(THREADS), str(PER_THREAD)]),
                 Workload([un, "unknown"]),
                 Workload([drv, "driver", str(DRIVER_N)]),
                 Workload([static, "runtime", "1"]),
                 Workload([unshare, "--mount", "--propagation", "private", "sh", "-c", in_ctr])]
        # Started now, so that it holds the libraries mapped while the others run and exit:
        # a library is detached two rescans after its last process exits, and its calls
        # would be lost if it started after that and ran before the next attach (it did,
        # on a loaded machine: none of its launches was counted).
        last = Workload([names, "names", str(MANY_NAMES)])
        assert not (ctr_dir / "libcudart.so.12").exists()  # not from here
        wait_attached(exp, cuda_build.dir)
        wait_attached(exp, ctr_dir)
        wait_until(lambda: static in attached(exp), f"probes on {static}")
        seen = attached(exp)
        for w in first:
            w.go()
        # Started after the exporter, with its own copy of both libraries (new inodes):
        # found by the periodic rescan, attached, counted.
        late_dir = tmp_path_factory.mktemp("late")
        for name in ("libcuda.so.1", "libcudart.so.12", "workload"):
            shutil.copy2(cuda_build.dir / name, late_dir / name)
        os.rename(late_dir / "workload", late_dir / "wl_late")
        late = Workload([str(late_dir / "wl_late"), "runtime", "1"])
        wait_attached(exp, late_dir)
        seen |= attached(exp)
        late.go()
        # Last, so that the names above are in before the cap.
        last.go()
        # The scrape that the tests read is one taken once the event loop has read the
        # last workload (its events come after everyone else's): on a loaded machine the
        # first scrape after it exits may come before.
        pid = str(last.proc.pid)

        def last_read() -> str:
            text = exp.scrape()
            s = parse(text)
            launched = sum(x.value for x in find(s, "gpu_kernel_launch_calls_total",
                                                 process_executable_name="drv_names"))
            synced = find(s, "gpu_sync_duration_seconds_count", process_pid=pid)
            assert launched >= MANY_NAMES and synced, (
                f"drv_names launches {launched} of {MANY_NAMES}, its syncs {synced}; "
                f"exited: {last.proc.poll()}; its series: "
                + "; ".join(f"{x.name}{x.labels} {x.value}" for x in s
                            if x.labels.get("process_pid") == pid) + "; "
                + "; ".join(f"{x.name}{x.labels} {x.value}" for x in s
                            if x.name.startswith("gpu_exporter_ebpf")
                            and ("drop" in x.name or "lost" in x.name) and x.value))
            return text

        text = eventually(last_read, 30, "the last workload read")
        pids = frozenset(str(w.proc.pid) for w in [*first, late, last])
        yield Scenario(text, parse(text), late_dir, pids, frozenset(seen))


def launches(s: Scenario, exe: str, **labels: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for x in find(s.series, "gpu_kernel_launch_calls_total", process_executable_name=exe,
                  **labels):
        out[f"{x.labels['cuda_api']}:{x.labels['cuda_kernel_name']}"] = x.value
    return out


def buckets(s: Scenario, name: str, **labels: str) -> dict[float, float]:
    return {float(x.labels["le"]): x.value for x in find(s.series, name + "_bucket", **labels)}


def test_scrape_is_valid_exposition(scenario: Scenario) -> None:
    promtool_check_metrics(scenario.text)


def test_runtime_launches_exact_per_kernel_name_no_double_counting(scenario: Scenario) -> None:
    # Every runtime launch also calls cuLaunchKernel/cuLaunchKernelEx in the driver: none
    # of those appear as driver launches.
    assert launches(scenario, "wl_runtime") == {
        "runtime:ml::gemm": RUNTIME_N,
        "runtime:vecAdd": 2 * RUNTIME_N,
        "runtime:(anonymous namespace)::helper": 1,  # cudaLaunchKernelExC, .symtab only
        "runtime:cooperative_kernel": 1,  # cudaLaunchCooperativeKernel
        "runtime:ns::Handled::run": 2,  # via an opaque __cudaGetKernel handle
        "graph:unknown": 3,  # cudaGraphLaunch
    }


def test_threads_counted_exactly(scenario: Scenario) -> None:
    assert launches(scenario, "wl_threads") == {"runtime:threaded_kernel": THREADS * PER_THREAD}


def test_unresolvable_address_is_unknown_never_an_address(scenario: Scenario) -> None:
    assert launches(scenario, "wl_unknown") == {"runtime:unknown": 1}
    for x in find(scenario.series, "gpu_kernel_launch_calls_total"):
        assert not x.labels["cuda_kernel_name"].startswith("0x"), x


def test_driver_only_process_counted_and_named_from_handles(scenario: Scenario) -> None:
    assert launches(scenario, "driver_only") == {
        "driver:triton::matmul_v2": DRIVER_N,  # cuModuleGetFunction -> cuLaunchKernel
        "driver:fused_kernel": 2,  # cuLibraryGetKernel -> cuKernelGetFunction -> ...Ex
    }


def test_process_started_after_exporter_with_its_own_library_copy(scenario: Scenario) -> None:
    assert {f"{scenario.late_dir}/libcudart.so.12", f"{scenario.late_dir}/libcuda.so.1"} <= (
        scenario.attached)
    assert launches(scenario, "wl_late")["runtime:ml::gemm"] == 1
    assert launches(scenario, "wl_late")["runtime:vecAdd"] == 2


def test_statically_linked_runtime_found_by_its_symbols(scenario: Scenario) -> None:
    assert any(lib.endswith("/wl_static") for lib in scenario.attached), scenario.attached
    assert launches(scenario, "wl_static") == {
        "runtime:ml::gemm": 1, "runtime:vecAdd": 2, "runtime:(anonymous namespace)::helper": 1,
        "runtime:cooperative_kernel": 1, "runtime:ns::Handled::run": 2, "graph:unknown": 3,
    }


def test_copy_inside_a_container_found_and_named(scenario: Scenario) -> None:
    assert launches(scenario, "wl_ctr") == {
        "runtime:ml::gemm": 1, "runtime:vecAdd": 2, "runtime:(anonymous namespace)::helper": 1,
        "runtime:cooperative_kernel": 1, "runtime:ns::Handled::run": 2, "graph:unknown": 3,
    }


def test_kernel_name_cap_and_overflow_counter(scenario: Scenario) -> None:
    names = {x.labels["cuda_kernel_name"]
             for x in find(scenario.series, "gpu_kernel_launch_calls_total")} - {"unknown",
                                                                                 "other"}
    assert len(names) == NAMES_MAX
    got = launches(scenario, "drv_names")
    admitted = NAMES_MAX - 8  # 6 runtime + 2 driver names came first
    assert got == {**{f"driver:kern_{i:03d}": 1 for i in range(admitted)},
                   "driver:other": MANY_NAMES - admitted}
    assert value(scenario.series, "gpu_exporter_ebpf_kernel_names_overflow_total") == (
        MANY_NAMES - admitted)


def test_grid_and_block_histograms(scenario: Scenario) -> None:
    exe = {"process_executable_name": "wl_runtime"}
    # grids: 105 x5 (3*5*7), 1000 x10, 4, 16, 1 x2 (the handle launches)
    grid = buckets(scenario, "gpu_kernel_grid_size", **exe)
    assert {le: grid[le] for le in (1, 4, 16, 64, 256, 1024, math.inf)} == {
        1: 2, 4: 3, 16: 4, 64: 4, 256: 9, 1024: 19, math.inf: 19}
    assert value(scenario.series, "gpu_kernel_grid_size_sum", **exe) == (
        105 * RUNTIME_N + 1000 * 2 * RUNTIME_N + 4 + 16 + 2)
    # blocks: 256 (32*4*2) x15, 64, 512, 1 x2
    block = buckets(scenario, "gpu_kernel_block_size", **exe)
    assert {le: block[le] for le in (1, 32, 64, 128, 256, 512, 1024, math.inf)} == {
        1: 2, 32: 2, 64: 3, 128: 3, 256: 18, 512: 19, 1024: 19, math.inf: 19}
    drv = {"process_executable_name": "driver_only"}
    assert value(scenario.series, "gpu_kernel_grid_size_sum", **drv) == 8 * DRIVER_N + 8 * 2
    assert value(scenario.series, "gpu_kernel_block_size_sum", **drv) == 128 * (DRIVER_N + 2)


def test_copy_bytes_per_kind_exact(scenario: Scenario) -> None:
    def copies(exe: str) -> dict[str, tuple[float, float]]:
        return {
            x.labels["cuda_memcpy_kind"]: (
                x.value, value(scenario.series, "gpu_memory_copies_bytes_count", **x.labels))
            for x in find(scenario.series, "gpu_memory_copies_bytes_sum",
                          process_executable_name=exe)
        }

    assert copies("wl_runtime") == {
        "HostToDevice": (3 * 1000 + 5000, 4), "DeviceToHost": (2 * 4096, 2),
        "DeviceToDevice": (1 << 20, 1), "HostToHost": (10, 1), "Default": (7, 1),
    }
    assert copies("driver_only") == {"HostToDevice": (2 * 333, 2), "DeviceToHost": (444, 1)}
    hd = buckets(scenario, "gpu_memory_copies_bytes", process_executable_name="wl_runtime",
                 cuda_memcpy_kind="HostToDevice")
    assert (hd[256], hd[1024], hd[4096], hd[16384]) == (0, 3, 3, 4)


def test_allocation_bytes_exact(scenario: Scenario) -> None:
    def alloc(exe: str, api: str, memory: str) -> tuple[float, float]:
        labels = {"process_executable_name": exe, "cuda_api": api, "cuda_memory_type": memory}
        return (value(scenario.series, "gpu_memory_allocations_bytes_sum", **labels),
                value(scenario.series, "gpu_memory_allocations_bytes_count", **labels))

    assert alloc("wl_runtime", "runtime", "device") == (2 * (1 << 20) + 100, 3)
    assert alloc("wl_runtime", "runtime", "managed") == (12345, 1)
    assert alloc("driver_only", "driver", "device") == (4096, 1)
    # The runtime's allocations reach cuMemAlloc in the driver: not counted again.
    assert not find(scenario.series, "gpu_memory_allocations_bytes_sum",
                    process_executable_name="wl_runtime", cuda_api="driver")


def test_sync_counts_and_plausible_durations(scenario: Scenario) -> None:
    counts: dict[str, float] = {}
    for x in scenario.ours("gpu_sync_duration_seconds_count"):
        counts[x.labels["cuda_sync_call"]] = counts.get(x.labels["cuda_sync_call"], 0) + x.value
    # cudaDeviceSynchronize: runtime, threads, unknown, static, container, late; the
    # driver calls they make are not counted again (cuCtxSynchronize: driver_only and
    # drv_names only).
    assert counts == {"cudaStreamSynchronize": 4, "cudaDeviceSynchronize": 6,
                      "cuStreamSynchronize": 1, "cuCtxSynchronize": 2}
    for call, n in counts.items():
        # The fake driver blocks 2 ms in every synchronise: nothing at or under ~1 ms,
        # everything under ~17 s.
        fast = sum(x.value for x in scenario.ours("gpu_sync_duration_seconds_bucket",
                                                  cuda_sync_call=call)
                   if float(x.labels["le"]) == 2**20 * 1e-9)
        slow = sum(x.value for x in scenario.ours("gpu_sync_duration_seconds_bucket",
                                                  cuda_sync_call=call)
                   if float(x.labels["le"]) == 2**34 * 1e-9)
        assert (fast, slow) == (0, n), call
        total = sum(x.value for x in scenario.ours("gpu_sync_duration_seconds_sum",
                                                   cuda_sync_call=call))
        assert 0.002 * n <= total < 10 * n, (call, total)


def test_kernel_duration_model(scenario: Scenario) -> None:
    by_name: dict[str, float] = {}
    for x in scenario.ours("gpu_kernel_duration_seconds_count",
                           gpu_measurement_source="ebpf_model"):
        # No event is recorded or queried here: only synchronises bound them.
        assert x.labels["completion"] == "sync_fallback", x
        name = x.labels["cuda_kernel_name"]
        by_name[name] = by_name.get(name, 0) + x.value
    launched: dict[str, float] = {}
    for x in scenario.ours("gpu_kernel_launch_calls_total"):
        if x.labels["cuda_api"] != "graph":  # (a graph launch's sample is "unknown")
            name = x.labels["cuda_kernel_name"]
            launched[name] = launched.get(name, 0) + x.value
    # Every launch a synchronise covered has its sample, on every stream, from every
    # thread (issue #27: only the first launch after a synchronise had one).
    for name in ("ml::gemm", "vecAdd", "threaded_kernel", "triton::matmul_v2",
                 "ns::Handled::run"):
        assert by_name[name] == launched[name] > 0, name
    for x in scenario.ours("gpu_kernel_duration_seconds_bucket"):
        if float(x.labels["le"]) == 2**20 * 1e-9:
            assert x.value == 0, x  # launch -> synchronise return >= 2 ms


def test_drop_counters_exported_and_zero(scenario: Scenario) -> None:
    reasons = {x.labels["reason"]: x.value
               for x in find(scenario.series, "gpu_exporter_ebpf_events_dropped_total")}
    assert reasons == {"stats_map_full": 0, "threads_map_full": 0, "pending_map_full": 0,
                       "event_buffer_full": 0, "bad_argument": 0,
                       "process_event_buffer_full": 0, "copy_size_unknown": 0,
                       "graph_map_full": 0, "graph_event_buffer_full": 0,
                       "graph_nodes_full": 0, "call_unfinished": 0,
                       "kernel_name_too_long": 0, "cuda_event_map_full": 0}


def test_feature_enabled(scenario: Scenario) -> None:
    assert value(scenario.series, "gpu_exporter_feature_status", feature="ebpf",
                 state="enabled") == 1
    assert value(scenario.series, "gpu_exporter_collector_success", collector="ebpf") == 1


def test_without_nvml_no_device_labels_and_a_feature_state_says_why(scenario: Scenario
                                                                     ) -> None:
    assert value(scenario.series, "gpu_exporter_feature_status", feature="ebpf.device_labels",
                 state="unavailable") == 1
    cuda = [x for x in scenario.series if x.name.startswith("gpu_") and
            x.labels.get("process_pid") in scenario.pids]
    assert cuda and not [x for x in cuda if "hw_id" in x.labels or "gpu_index" in x.labels]


def _perf_event_fds(pid: int) -> int:
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[perf_event]":
                n += 1
        except OSError:
            pass
    return n


def test_default_labels_then_sigterm_detaches_every_probe(cuda_build: Build) -> None:
    w = Workload([copy_program(cuda_build, "workload", "wl_small"), "threads", "1", "3"])
    args = [*only_ebpf_args(), "--collector.ebpf", "--ebpf.rescan-interval=0.2"]
    with exporter(args) as exp:
        try:
            wait_attached(exp, cuda_build.dir)
            assert _perf_event_fds(exp.proc.pid) > 0  # one per attached probe
        finally:
            w.go()
        series = parse(exp.scrape())
        assert value(series, "gpu_kernel_launch_calls_total", cuda_kernel_name="threaded_kernel",
                     process_executable_name="wl_small") == 3
        assert not [x for x in series if "process_pid" in x.labels]  # opt-in only
        exp.proc.send_signal(signal.SIGTERM)
        assert exp.proc.wait(30) == 0, exp.logs()
        assert "detached" in exp.logs()
    events = Path("/sys/kernel/tracing/uprobe_events").read_text()
    assert "libcudart" not in events and "libcuda" not in events, events


def test_otel_env_var_enables_and_doctor_reports(cuda_build: Build) -> None:
    res = run_cli(["doctor", *only_ebpf_args()], {"OTEL_GPU_EBPF_ENABLED": "true"})
    assert res.returncode == 0, res.stderr
    line = next(x for x in res.stdout.splitlines() if x.startswith("ebpf "))
    assert line.split()[1] == "enabled", res.stdout


def test_without_privileges_unavailable_and_exporter_runs_on() -> None:
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is missing"
    res = subprocess.run(
        [setpriv, "--bounding-set=-bpf,-perfmon,-sys_admin", "--inh-caps=-all",
         EXPORTER, "doctor", *only_ebpf_args(),
         "--collector.ebpf"],
        capture_output=True, text=True, timeout=60,
    )
    assert res.returncode == 0, res.stderr
    line = next(x for x in res.stdout.splitlines() if x.startswith("ebpf "))
    assert "unavailable" in line and "CAP_BPF" in line, res.stdout
