"""Per-thread state in the BPF program: a table found by the thread's key (the address of
its saved user registers) for most threads, task-local storage for a thread whose place
in the table another thread holds; a thread's exit frees its place. Driven directly
(real uprobes on a copy of the fake runtime), with the table shrunk to two places so
that four threads alive at once must use both."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.ebpf.conftest import Build, Workload, fresh_copy, probe_points

THREADS, PER_THREAD = 4, 50
TWO_PLACES = ("-UFAST_THREADS_BITS", "-DFAST_THREADS_BITS=1", "-UFAST_THREADS",
              "-DFAST_THREADS=2")


def _launches(bpf: Any, pid: int) -> int:
    from gpu_exporter.model import ebpf_abi as abi

    n = sum(int(v.value) for k, v in bpf[b"stats"].items()
            if k.fam == abi.FAM_LAUNCH and k.tgid == pid)
    slots, shapes = bpf[b"proc_slots"], bpf[b"shapes"]
    slot = shapes.Key(int(slots[slots.Key(pid)].value))
    return n + sum(int(s.n) for s in shapes[slot].launches)


def _keys(bpf: Any) -> list[int]:
    return [int(v.key) for v in bpf[b"fast_threads"].values()]


def test_threads_beyond_the_table_counted_exactly_and_exits_free_their_places(
        cuda_build: Build, tmp_path: Path) -> None:
    import bcc

    from gpu_exporter.sources.ebpf import uprobes
    from gpu_exporter.sources.ebpf.loader import attach_raw_tracepoints, load_bpf, uprobe_programs

    d = fresh_copy(cuda_build, tmp_path / "img")
    lib = str(d / "libcudart.so.12")
    bpf = load_bpf(bcc, extra_flags=TWO_PLACES)
    tracepoints: list[int] = []
    try:
        assert len(_keys(bpf)) == 2
        tracepoints = attach_raw_tracepoints(bpf, bcc)
        mech = uprobes.mechanism(uprobes.UPROBE_MULTI, bpf, bcc)
        mech.load(uprobe_programs())
        a = mech.attach(lib, probe_points(lib, "cudaLaunchKernel"))
        try:
            runs = []
            for _ in range(2):  # the second run finds the places its predecessor freed
                w = Workload([str(d / "workload"), "threads", str(THREADS), str(PER_THREAD)])
                w.go()
                runs.append(w.proc.pid)
                assert w.proc.wait(30) == 0
                # Each of the four threads, alive at once, launched through its own
                # state: two at most in the table, the others in task-local storage.
                assert _launches(bpf, w.proc.pid) == THREADS * PER_THREAD
                # Their exits freed every place they held, zeroed.
                assert _keys(bpf) == [0, 0]
                assert all(v.tgid == 0 and v.dev == 0 and v.slot == 0 and v.side[0].depth == 0
                           for v in bpf[b"fast_threads"].values())
            assert runs[0] != runs[1]
        finally:
            mech.detach([a])
    finally:
        uprobes.close_all(tracepoints, os.close)
        bpf.cleanup()


def test_a_place_not_freed_without_the_exit_tracepoint(cuda_build: Build,
                                                         tmp_path: Path) -> None:
    """The test above can fail: without the raw tracepoint, exited threads keep their
    places (so the probes never run without it)."""
    import bcc

    from gpu_exporter.sources.ebpf import uprobes
    from gpu_exporter.sources.ebpf.loader import load_bpf, uprobe_programs

    d = fresh_copy(cuda_build, tmp_path / "img")
    lib = str(d / "libcudart.so.12")
    bpf = load_bpf(bcc, extra_flags=TWO_PLACES)
    try:
        mech = uprobes.mechanism(uprobes.UPROBE_MULTI, bpf, bcc)
        mech.load(uprobe_programs())
        a = mech.attach(lib, probe_points(lib, "cudaLaunchKernel"))
        try:
            w = Workload([str(d / "workload"), "threads", str(THREADS), str(PER_THREAD)])
            w.go()
            assert w.proc.wait(30) == 0
            assert _launches(bpf, w.proc.pid) == THREADS * PER_THREAD
            assert any(_keys(bpf))
        finally:
            mech.detach([a])
    finally:
        bpf.cleanup()
