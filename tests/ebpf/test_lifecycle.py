"""Probes follow the processes: attached when a process execs or maps a CUDA library
(not at the next rescan), detached when the last process mapping a file has exited,
all detached within seconds at SIGTERM, never attached by `doctor`. Real exporter, real
uprobes, fake CUDA libraries copied to new files (new inodes) so no probe has seen them.

Whether a probe is in place is read from the workload's own memory: the kernel writes an
int3 over the probed instruction in every process mapping the file and restores it when
the probe goes."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

from tests.ebpf.conftest import (
    Build,
    Workload,
    attached,
    breakpoint_set,
    engine,
    fresh_copy,
    only_ebpf_args,
    probe_address,
    probe_points,
    wait_until,
)
from tests.helpers import EXPORTER, exporter, find, parse, run_cli, value

RESCAN = 0.5


def _launches(text: str, exe: str) -> dict[str, float]:
    return {f"{x.labels['cuda_api']}:{x.labels['cuda_kernel_name']}": x.value
            for x in find(parse(text), "gpu_kernel_launch_calls_total",
                          process_executable_name=exe)}


def _log_counts(logs: str, verb: str) -> dict[str, int]:
    """{path: probes} from the "attached N probes to PATH" / "detached N probes from
    PATH" log lines."""
    prep = "to" if verb == "attached" else "from"
    return {m.group(2): int(m.group(1))
            for m in re.finditer(rf"{verb} (\d+) probes {prep} (\S+)", logs)}


def _expected_probes(lib: str) -> int:
    """An entry and a return probe on each probed symbol the file defines."""
    from gpu_exporter.model import ebpf_abi as abi
    from gpu_exporter.sources.ebpf.elf import ElfFile

    return 2 * len(ElfFile.open(lib).functions(abi.BY_SYMBOL))


def test_probes_detached_within_two_rescans_of_the_last_process(
        cuda_build: Build, tmp_path: Path) -> None:
    d = fresh_copy(cuda_build, tmp_path / "img")
    libs = {str(d / "libcudart.so.12"), str(d / "libcuda.so.1")}
    args = [*only_ebpf_args(), "--collector.ebpf", f"--ebpf.rescan-interval={RESCAN}"]
    with exporter(args) as exp:
        first = Workload([str(d / "workload"), "runtime", "1"])
        second = Workload([str(d / "workload"), "runtime", "1"])
        wait_until(lambda: libs <= attached(exp), "probes on the new files")
        at = probe_address(second.proc.pid, str(d / "libcudart.so.12"), "cudaLaunchKernel")
        assert breakpoint_set(second.proc.pid, at)
        first.go()
        time.sleep(3 * RESCAN)  # one process still maps the files: they stay
        assert libs <= attached(exp)
        assert breakpoint_set(second.proc.pid, at)
        pid = second.proc.pid
        second.go()
        exited = time.monotonic()
        wait_until(lambda: not libs & attached(exp), "the files to be dropped", timeout=10)
        # Two rescans, plus one for the scan that was under way, plus the scrape.
        assert time.monotonic() - exited <= 3 * RESCAN + 1.0
        assert not Path(f"/proc/{pid}").exists()
        logs = exp.logs()
        wait_until(lambda: libs <= set(_log_counts(exp.logs(), "detached")), "detach logs")
        logs = exp.logs()
        did, undid = _log_counts(logs, "attached"), _log_counts(logs, "detached")
        for lib in libs:
            assert did[lib] == undid[lib] > 0, (lib, did, undid)
        # Mapped again by a new process: probed again, counted.
        again = Workload([str(d / "workload"), "runtime", "1"])
        wait_until(lambda: libs <= attached(exp), "probes on the files mapped again")
        again.go()
        assert _launches(exp.scrape(), "workload")["runtime:ml::gemm"] == 3


def test_first_call_100ms_after_exec_or_dlopen_from_files_never_probed(
        cuda_build: Build, tmp_path: Path) -> None:
    """No rescan happens during the test (the interval is long): only the exec and mmap
    tracking can find these files, and the processes are gone before any rescan."""
    args = [*only_ebpf_args(), "--collector.ebpf", "--ebpf.rescan-interval=600"]
    with exporter(args) as exp:
        exp.scrape()  # started: the first scan is done
        dyn = fresh_copy(cuda_build, tmp_path / "dyn", ["workload"])
        static = fresh_copy(cuda_build, tmp_path / "static", ["wl_static"])
        late = fresh_copy(cuda_build, tmp_path / "late", ["dlopen_driver"])
        procs = [
            subprocess.run([str(dyn / "workload"), "runtime", "2", "--sleep-ms", "100"],
                           capture_output=True, text=True, timeout=30),
            subprocess.run([str(static / "wl_static"), "runtime", "1", "--sleep-ms", "100"],
                           capture_output=True, text=True, timeout=30),
            # exec long before: the library arrives by dlopen, the call 100 ms after it
            subprocess.run([str(late / "dlopen_driver"), str(late / "libcuda.so.1"), "5",
                            "100"], capture_output=True, text=True, timeout=30),
        ]
        for p in procs:
            assert p.returncode == 0 and p.stdout.strip().endswith("done"), p
        text = exp.scrape()
    assert _launches(text, "workload") == {
        "runtime:ml::gemm": 2, "runtime:vecAdd": 4, "runtime:(anonymous namespace)::helper": 1,
        "runtime:cooperative_kernel": 1, "runtime:ns::Handled::run": 2, "graph:unknown": 3}
    assert _launches(text, "wl_static") == {
        "runtime:ml::gemm": 1, "runtime:vecAdd": 2, "runtime:(anonymous namespace)::helper": 1,
        "runtime:cooperative_kernel": 1, "runtime:ns::Handled::run": 2, "graph:unknown": 3}
    assert _launches(text, "dlopen_driver") == {"driver:late_loaded_k": 5}


def test_sigterm_detaches_300_probes_within_5_seconds(cuda_build: Build,
                                                       tmp_path: Path) -> None:
    per_copy = sum(_expected_probes(cuda_build.path(n))
                   for n in ("libcudart.so.12", "libcuda.so.1"))
    copies = [fresh_copy(cuda_build, tmp_path / f"c{i}") for i in range(-(-300 // per_copy))]
    workloads = [Workload([str(d / "workload"), "runtime", "1"]) for d in copies]
    try:
        args = [*only_ebpf_args(), "--collector.ebpf", f"--ebpf.rescan-interval={RESCAN}"]
        with exporter(args) as exp:
            libs = {f"{d}/{n}" for d in copies for n in ("libcudart.so.12", "libcuda.so.1")}
            wait_until(lambda: libs <= attached(exp), "probes on every copy")
            # Only these copies' probes: the exporter also probes any other CUDA program
            # on the host (on a shared machine, other test runs' copies).
            probes = sum(n for lib, n in _log_counts(exp.logs(), "attached").items()
                         if lib in libs)
            assert probes == per_copy * len(copies) >= 300, probes
            points = [(w.proc.pid, probe_address(w.proc.pid, f"{d}/libcudart.so.12",
                                                 "cudaLaunchKernel"))
                      for w, d in zip(workloads, copies, strict=True)]
            assert all(breakpoint_set(pid, at) for pid, at in points)
            sent = time.monotonic()
            exp.proc.send_signal(signal.SIGTERM)
            assert exp.proc.wait(30) == 0, exp.logs()
            took = time.monotonic() - sent
            print(f"SIGTERM to exit: {took:.2f} s;", re.findall(r"detached \d+ eBPF.*", exp.logs()))
            assert took <= 5.0, f"SIGTERM to exit took {took:.1f} s:\n{exp.logs()}"
            # At exit it detaches every probe it holds: these copies' and any other's.
            done = re.search(r"detached (\d+) eBPF probes from (\d+) files", exp.logs())
            assert done and int(done[1]) >= probes and int(done[2]) >= len(libs), exp.logs()
        assert not any(breakpoint_set(pid, at) for pid, at in points)
        events = Path("/sys/kernel/tracing/uprobe_events").read_text()
        assert not any(str(d) in events for d in copies), events
    finally:
        for w in workloads:
            w.go()


def test_doctor_attaches_nothing_and_names_the_files(cuda_build: Build,
                                                     tmp_path: Path) -> None:
    d = fresh_copy(cuda_build, tmp_path / "doc")
    w = Workload([str(d / "workload"), "runtime", "1"])
    try:
        at = probe_address(w.proc.pid, str(d / "libcudart.so.12"), "cudaLaunchKernel")
        # Not probed before doctor runs: else another eBPF exporter on this host probes
        # every CUDA program, this one too, and the test cannot tell.
        assert not breakpoint_set(w.proc.pid, at), "probed already: another eBPF exporter runs"
        doctor = subprocess.Popen(
            [EXPORTER, "doctor", *only_ebpf_args(), "--collector.ebpf"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = False
        while True:  # all the while it runs: no breakpoint (a look every 10 ms)
            seen |= breakpoint_set(w.proc.pid, at)
            try:
                doctor.wait(0.01)
                break
            except subprocess.TimeoutExpired:
                pass
        out, err = doctor.communicate()
        assert doctor.returncode == 0, err
        assert not seen, ("a probe was set while doctor ran" + (
            "; still set after it exited: another eBPF exporter on this host probes it"
            if breakpoint_set(w.proc.pid, at) else ""))
        line = next(x for x in out.splitlines() if x.startswith("ebpf "))
        assert line.split()[1] == "enabled", out
        assert "compiles and loads" in line and "would probe" in line, line
        assert f"{d}/libcudart.so.12" in line and f"{d}/libcuda.so.1" in line, line
    finally:
        w.go()


def test_bad_mechanism_flag_is_a_config_error() -> None:
    res = run_cli(["doctor", *only_ebpf_args(), "--collector.ebpf",
                   "--ebpf.attach-mechanism=bogus"])
    assert res.returncode == 2, res
    assert "attach-mechanism" in res.stderr and "bogus" in res.stderr


def test_both_attach_mechanisms_place_count_and_remove_probes(cuda_build: Build,
                                                              tmp_path: Path) -> None:
    """uprobe_multi links (what this kernel has) and bcc's perf events (the fallback for
    kernels before 6.6), driven directly: probes appear in a running process, count its
    launches, and are gone after detach."""
    import bcc

    from gpu_exporter.model import ebpf_abi as abi
    from gpu_exporter.sources.ebpf import uprobes
    from gpu_exporter.sources.ebpf.loader import load_bpf, uprobe_programs

    assert uprobes.uprobe_multi_supported() is None
    for name in uprobes.MECHANISMS:
        d = fresh_copy(cuda_build, tmp_path / name)
        lib = str(d / "libcudart.so.12")
        bpf = load_bpf(bcc)
        try:
            mech = uprobes.mechanism(name, bpf, bcc)
            mech.load(uprobe_programs())
            points = probe_points(lib, "cudaLaunchKernel")
            w = Workload([str(d / "workload"), "threads", "1", "7"])
            at = probe_address(w.proc.pid, lib, "cudaLaunchKernel")
            a = mech.attach(lib, points)
            assert a.probes == 2 and breakpoint_set(w.proc.pid, at)
            mech.detach([a])
            assert not breakpoint_set(w.proc.pid, at)
            a = mech.attach(lib, points)
            w.go()
            launches = sum(int(v.value) for k, v in bpf[b"stats"].items()
                           if k.fam == abi.FAM_LAUNCH and k.tgid == w.proc.pid)
            slots, shapes = bpf[b"proc_slots"], bpf[b"shapes"]
            slot = shapes.Key(int(slots[slots.Key(w.proc.pid)].value))
            launches += sum(int(s.n) for s in shapes[slot].launches)
            assert launches == 7, name
            mech.detach([a])
        finally:
            bpf.cleanup()


def test_a_slot_given_back_by_an_exited_process_counts_the_next_one_from_zero(
        cuda_build: Build, tmp_path: Path) -> None:
    """Launch shapes and counters are kept per process in a slot of a BPF array; the read
    after a process exited folds its counts and gives the slot back, zeroed, to the next
    process that launches: each process counted exactly, the first one's counts kept."""
    d = fresh_copy(cuda_build, tmp_path / "img", programs=("driver_only",))
    lib = str(d / "libcuda.so.1")
    args = [*only_ebpf_args(), "--collector.ebpf", f"--ebpf.rescan-interval={RESCAN}",
            "--ebpf.pid-label"]
    with exporter(args) as exp:
        runs: dict[str, int] = {}
        for n in (5, 3):
            w = Workload([str(d / "driver_only"), "driver", str(n)])
            wait_until(lambda: lib in attached(exp), "probes on the new libcuda")
            w.go()
            runs[str(w.proc.pid)] = n
            exp.scrape()  # the read that folds the exited process: its slot given back
        series = parse(exp.scrape())
    for pid, n in runs.items():
        assert value(series, "gpu_kernel_grid_size_count", process_pid=pid) == n + 2
        assert value(series, "gpu_kernel_grid_size_sum", process_pid=pid) == 8 * n + 16
        assert value(series, "gpu_kernel_block_size_sum", process_pid=pid) == 128 * (n + 2)
        assert sum(x.value for x in find(series, "gpu_kernel_launch_calls_total",
                                         process_pid=pid)) == n + 2


def test_a_file_whose_mapper_exits_during_the_attach_is_tried_again(cuda_build: Build,
                                                                     tmp_path: Path) -> None:
    """A file is opened through its mapping process's /proc/<pid>/map_files link. When
    that process exits between the scan and the attach (a short-lived program), the
    attach fails, and the file is not given up: the next scan attaches it through the
    next process that maps it, and that process is counted."""
    import os

    from gpu_exporter.sources.ebpf.libraries import Candidate

    d = fresh_copy(cuda_build, tmp_path / "img", programs=("driver_only",))
    lib = str(d / "libcuda.so.1")
    st = os.stat(lib)
    file = (f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}", st.st_ino)
    gone = subprocess.Popen(["true"])
    gone.wait()
    with engine() as e:
        # What the scan found, opened after its process exited.
        e.attacher.attach_new([Candidate(file, gone.pid, lib,
                                 f"/proc/{gone.pid}/map_files/7f0000000000-7f0000001000")])
        assert lib not in e.read().attached_libraries
        w = Workload([str(d / "driver_only"), "driver", "3"])
        e.rescan()
        assert lib in e.read().attached_libraries
        w.go()
        launches = [x for x in e.read().launches if x.pid == w.proc.pid]
        assert sum(x.count for x in launches) == 3 + 2
