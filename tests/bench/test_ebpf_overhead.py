"""What the eBPF probes cost a CUDA or HIP application, per launch call, measured side by
side in one run (`make bench`, root): a loop of N kernel launches (tests/ebpf/csrc/
launch_loop.c; for HIP hip_launch_loop.hip, built by hipcc, over the fake
libamdhip64.so.5: hipLaunchKernel or hipModuleLaunchKernel; timing itself) with

- `no_probe`: nothing attached;
- `noop_one_uprobe`: one no-op uprobe on the launch symbol (the uprobe trap alone);
- `noop_same_points`: no-op programs on every attach point the loop hits, as the collector
  attaches them (every probed call has an entry and a return probe: runtime loop:
  cudaLaunchKernel and the cuLaunchKernel the runtime calls into; driver loop:
  cuLaunchKernel), through the same mechanism (uprobe_multi links);
- `frames_only`: the collector's program built with -DFRAMES_ONLY on the same points:
  the per-thread frame kept from entry to return (the per-thread state, the BPF cookie),
  nothing counted. What `ours` costs above the no-op programs splits into this, which
  any count made on return (on success only) needs, and the counting itself;
- `ours`: the collector's own compiled program (gpu_exporter/sources/ebpf/program.c) on the same
  points.

The cases are interleaved round by round (attach, run, detach), so a noisy neighbour
hits them alike. After the timed rounds, one loop per probed case runs with the kernel's
BPF statistics on (BPF_ENABLE_STATS): the programs' own run time per launch, far less
noisy than the wall clock (the rest of a case's cost is the traps); not timed, as the
statistics add two clock reads to every program run. Target: `ours` <= 1.15x
`noop_same_points`. The numbers go to build/bench/results.json and, by hand, to
docs/performance.md.
"""

from __future__ import annotations

import ctypes
import statistics
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.model import ebpf_abi as abi
from tests.bench.conftest import Results
from tests.ebpf.conftest import HIP_LIB, Build, build_hip_into, build_into

CALLS = 200_000
ROUNDS = 7
NOOP = b"int noop(struct pt_regs *ctx) { return 0; }"
CASES = ["no_probe", "noop_one_uprobe", "noop_same_points", "frames_only", "ours"]
# The symbols each loop's calls reach (the runtime calls the driver).
LOOP_SYMBOLS = {"runtime": ("cudaLaunchKernel", "cuLaunchKernel"),
                "driver": ("cuLaunchKernel",), "hip": ("hipLaunchKernel",),
                "hip_module": ("hipModuleLaunchKernel",)}
LOOPS = {"runtime": "launch_loop", "driver": "launch_loop", "hip": "hip_launch_loop",
         "hip_module": "hip_launch_loop"}


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """The CUDA fakes and loop, and in the same folder the HIP ones."""
    out = tmp_path_factory.mktemp("bench-cuda")
    build_hip_into(out)
    return build_into(out)


def _library(build: Build, symbol: str) -> str:
    if symbol.startswith("hip"):
        return build.path(HIP_LIB)
    return build.path("libcudart.so.12" if symbol.startswith("cuda") else "libcuda.so.1")


@pytest.fixture(scope="module")
def programs() -> dict[str, Any]:
    import bcc

    from gpu_exporter.sources.ebpf import uprobes
    from gpu_exporter.sources.ebpf.loader import load_bpf, uprobe_programs

    noop, ours = bcc.BPF(text=NOOP), load_bpf(bcc)
    frames = load_bpf(bcc, extra_flags=("-DFRAMES_ONLY=1",))
    bpfs = {"noop": noop, "ours": ours, "frames_only": frames}
    mechs = {"noop": uprobes.mechanism(uprobes.UPROBE_MULTI, noop, bcc),
             "ours": uprobes.mechanism(uprobes.UPROBE_MULTI, ours, bcc),
             "frames_only": uprobes.mechanism(uprobes.UPROBE_MULTI, frames, bcc)}
    mechs["noop"].load(["noop"])
    mechs["ours"].load(uprobe_programs())
    mechs["frames_only"].load(uprobe_programs())
    return {"noop": noop, "ours": ours, "mechanisms": mechs, "bpf": bpfs}


def _loop(build: Build, api: str) -> float:
    """One launch loop process; its own mean nanoseconds per call."""
    p = subprocess.Popen([build.path(LOOPS[api]), api, str(CALLS)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    out, _ = p.communicate("go\n", timeout=300)
    assert p.returncode == 0
    return float(out.split()[-1])


def _points(build: Build, api: str, case: str) -> dict[str, list[Any]]:
    """The probes of one case, by library: the collector's own (entry program and the
    return program, with their cookies) or no-op programs on the same points."""
    from gpu_exporter.sources.ebpf import uprobes
    from gpu_exporter.sources.ebpf.elf import ElfFile

    out: dict[str, list[Any]] = {}
    symbols = LOOP_SYMBOLS[api][:1] if case == "noop_one_uprobe" else LOOP_SYMBOLS[api]
    for symbol in symbols:
        lib = _library(build, symbol)
        elf = ElfFile.open(lib)
        offset = elf.offset_of_vaddr(elf.functions([symbol])[symbol])
        assert offset is not None
        cookie = abi.cookie(abi.INDEX[symbol])
        ours = case in ("ours", "frames_only")
        points = out.setdefault(lib, [])
        points.append(uprobes.Point(offset, abi.BY_SYMBOL[symbol].program if ours else "noop",
                                   False, cookie))
        if case != "noop_one_uprobe":
            ret = abi.return_program(abi.BY_SYMBOL[symbol]) if ours else "noop"
            points.append(uprobes.Point(offset, ret, True, cookie))
    return out


@contextmanager
def _attached(programs: dict[str, Any], build: Build, api: str, case: str) -> Iterator[None]:
    if case == "no_probe":
        yield
        return
    mech = programs["mechanisms"].get(case, programs["mechanisms"]["noop"])
    attachments = [mech.attach(lib, points)
                   for lib, points in _points(build, api, case).items()]
    try:
        yield
    finally:
        mech.detach(attachments)


def _run_time_ns(fd: int) -> int:
    """bpf_prog_info.run_time_ns of a loaded program (BPF_OBJ_GET_INFO_BY_FD: info's
    bpf_fd@0, info_len@4, info@8; run_time_ns is at 192 of struct bpf_prog_info)."""
    from gpu_exporter.sources.ebpf import uprobes

    info = (ctypes.c_uint8 * 256)()
    attr = (ctypes.c_uint8 * 144)()
    uprobes._put(attr, 0, ctypes.c_uint32, fd)
    uprobes._put(attr, 4, ctypes.c_uint32, len(info))
    uprobes._put(attr, 8, ctypes.c_uint64, ctypes.addressof(info))
    uprobes._bpf(_BPF_OBJ_GET_INFO_BY_FD, attr)
    return int(ctypes.c_uint64.from_buffer(info, 192).value)


_BPF_OBJ_GET_INFO_BY_FD = 15
_BPF_ENABLE_STATS = 32


@contextmanager
def _bpf_stats() -> Iterator[None]:
    """The kernel counts each BPF program's run time while the returned fd is open."""
    import os

    from gpu_exporter.sources.ebpf import uprobes

    attr = (ctypes.c_uint8 * 144)()  # enable_stats.type@0 = BPF_STATS_RUN_TIME (0)
    fd = uprobes._bpf(_BPF_ENABLE_STATS, attr)
    try:
        yield
    finally:
        os.close(fd)


def _program_ns(programs: dict[str, Any], build: Build, api: str, case: str) -> float:
    """The BPF programs' own run time per launch call in one loop of `case`."""
    bpf = programs["bpf"]["noop" if case.startswith("noop") else case]
    names = {p.program for pts in _points(build, api, case).values() for p in pts}
    fds = [bpf.funcs[n.encode()].fd for n in names]
    with _bpf_stats():
        before = sum(_run_time_ns(fd) for fd in fds)
        with _attached(programs, build, api, case):
            _loop(build, api)
        return (sum(_run_time_ns(fd) for fd in fds) - before) / CALLS


@pytest.mark.bench
@pytest.mark.parametrize("api", ["runtime", "driver", "hip", "hip_module"])
def test_launch_loop_cost(benchmark: Any, results: Results, build: Build,
                          programs: dict[str, Any], api: str) -> None:
    per_call: dict[str, list[float]] = {c: [] for c in CASES}

    def interleaved() -> None:
        for _ in range(ROUNDS):
            for case in CASES:
                with _attached(programs, build, api, case):
                    per_call[case].append(_loop(build, api))

    benchmark.pedantic(interleaved, rounds=1, iterations=1)
    program_ns = {c: _program_ns(programs, build, api, c)
                  for c in ("noop_same_points", "frames_only", "ours")}
    floor = statistics.median(per_call["noop_same_points"])
    for case in CASES:
        xs = per_call[case]
        row = {"ns_per_call_median": statistics.median(xs), "ns_per_call_min": min(xs),
               "ns_per_call_max": max(xs), "calls": CALLS, "rounds": ROUNDS,
               "ratio_to_noop_same_points": statistics.median(xs) / floor}
        if case in program_ns:
            row["bpf_program_ns_per_call"] = program_ns[case]
        results.put("ebpf_overhead", f"{api}/{case}", row)
        benchmark.extra_info[case] = row
        print(f"\n{api:8} {case:18} median {row['ns_per_call_median'] / 1000:.3f} µs/call "
              f"(min {min(xs) / 1000:.3f}, max {max(xs) / 1000:.3f}) "
              f"x{row['ratio_to_noop_same_points']:.2f} of noop_same_points"
              + (f"; BPF programs {program_ns[case]:.0f} ns/call" if case in program_ns
                 else ""))
    # The probes did fire: the collector's program counted every launch of the rounds.
    stats = programs["ours"][b"stats"]
    launches = sum(int(v.value) for k, v in stats.items() if k.fam == abi.FAM_LAUNCH)
    launches += sum(int(slot.n) for v in programs["ours"][b"shapes"].values()
                    for slot in v.launches)
    assert launches >= CALLS * ROUNDS


def test_cases_are_the_documented_ones() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "performance.md").read_text()
    section = doc.split("## eBPF", 1)[-1]
    for case in CASES:
        assert case in section, f"docs/performance.md eBPF section lacks {case}"
