#!/usr/bin/env python3
"""The eBPF launch path's cost before and after a change, paired in one run (as root,
bcc and kernel headers as for tests/ebpf):

    .venv/bin/python scripts/bench-ebpf-before-after.py BASE [CALLS] [ROUNDS]

BASE is a git revision whose gpu_exporter/sources/ebpf/program.c is "before"; the
checkout's is "after". Both are compiled with the checkout's abi.py constants (a base
whose program needs other constants fails to compile). tests/ebpf/csrc/launch_loop.c
makes CALLS launches (runtime and driver loops); no-op programs on the same points, the
before and the after programs are attached in turn, interleaved round by round
(ROUNDS), as tests/bench/test_ebpf_overhead.py does. Then the programs' own run time per
launch (the kernel's BPF statistics, three untimed loops each), and per iteration of
`completion many` (a launch, an event created and recorded: the record's cost).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import bcc  # noqa: E402

from gpu_exporter.model import ebpf_abi as abi  # noqa: E402
from gpu_exporter.sources.ebpf import uprobes  # noqa: E402
from gpu_exporter.sources.ebpf.elf import ElfFile  # noqa: E402
from gpu_exporter.sources.ebpf.loader import (  # noqa: E402
    DEFAULT_TRACEPOINT_OFFSETS,
    load_bpf,
    load_tails,
)
from tests.bench import test_ebpf_overhead as ov  # noqa: E402
from tests.ebpf.conftest import build_into  # noqa: E402

LAUNCH_PROGRAMS = ["rt_launch", "drv_launch", "on_return", "on_return_drv"]


def main() -> None:
    base = sys.argv[1]
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    ov.CALLS = calls
    old_text = subprocess.run(["git", "-C", str(REPO), "show",
                               f"{base}:gpu_exporter/sources/ebpf/program.c"],
                              check=True, capture_output=True).stdout
    build = build_into(Path(tempfile.mkdtemp(prefix="bench-before-after-")))
    flags = abi.defines() + [f"-D{k}={v}"
                             for k, v in sorted(DEFAULT_TRACEPOINT_OFFSETS.items())]
    bpfs = {"before": bcc.BPF(text=old_text, cflags=flags), "after": load_bpf(bcc),
            "noop": bcc.BPF(text=ov.NOOP)}
    mechs = {name: uprobes.mechanism(uprobes.UPROBE_MULTI, bpf, bcc)
             for name, bpf in bpfs.items()}
    mechs["noop"].load(["noop"])
    mechs["before"].load([*LAUNCH_PROGRAMS, "event_record"])
    mechs["after"].load([*LAUNCH_PROGRAMS, "event_record"])
    load_tails(mechs["after"])

    @contextmanager
    def attached(points: dict[str, list[Any]], case: str) -> Iterator[None]:
        links = [mechs[case].attach(lib, p) for lib, p in points.items()]
        try:
            yield
        finally:
            mechs[case].detach(links)

    for api in ("runtime", "driver"):
        per: dict[str, list[float]] = {c: [] for c in ("noop", "before", "after")}
        for _ in range(rounds):
            for case in per:
                pts = ov._points(build, api, "noop_same_points" if case == "noop" else "ours")
                with attached(pts, case):
                    per[case].append(ov._loop(build, api))
        floor = statistics.median(per["noop"])
        for case, xs in per.items():
            print(f"{api:8} {case:7} median {statistics.median(xs) / 1000:.3f} µs/launch "
                  f"(min {min(xs) / 1000:.3f}, max {max(xs) / 1000:.3f}) "
                  f"x{statistics.median(xs) / floor:.3f} of noop", flush=True)
        pairs = [a / b for a, b in zip(per["after"], per["before"], strict=True)]
        print(f"{api:8} after/before by round {[round(x, 3) for x in pairs]}, median "
              f"{statistics.median(pairs):.3f}", flush=True)

    def points_of(symbols: tuple[str, ...]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        for sym in symbols:
            lib = build.path("libcudart.so.12" if sym.startswith("cuda") else "libcuda.so.1")
            elf = ElfFile.open(lib)
            offset = elf.offset_of_vaddr(elf.functions([sym])[sym])
            assert offset is not None
            p, cookie = abi.BY_SYMBOL[sym], abi.cookie(abi.INDEX[sym])
            out.setdefault(lib, []).extend([uprobes.Point(offset, p.program, False, cookie),
                                            uprobes.Point(offset, abi.return_program(p), True,
                                                         cookie)])
        return out

    def program_ns(case: str, points: dict[str, list[Any]], argv: list[str], n: int) -> float:
        names = {p.program for ps in points.values() for p in ps} | {"close_groups"}
        fds = [bpfs[case].funcs[x.encode()].fd for x in names
               if x.encode() in bpfs[case].funcs]
        with ov._bpf_stats():
            before = sum(ov._run_time_ns(fd) for fd in fds)
            with attached(points, case):
                p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
                assert p.stdout is not None and p.stdout.readline().strip() == "ready"
                p.communicate("go\n", timeout=600)
            return (sum(ov._run_time_ns(fd) for fd in fds) - before) / n

    for api in ("runtime", "driver"):
        for case in ("before", "after"):
            xs = [program_ns(case, ov._points(build, api, "ours"),
                             [build.path("launch_loop"), api, str(calls)], calls)
                  for _ in range(3)]
            print(f"{api:8} {case:7} BPF programs {[round(x) for x in xs]} ns/launch",
                  flush=True)
    n = 20_000
    symbols = ("cudaLaunchKernel", "cuLaunchKernel", "cudaEventRecord", "cuEventRecord")
    for case in ("before", "after"):
        xs = [program_ns(case, points_of(symbols),
                         [build.path("completion"), "many", str(n), "--wait"], n)
              for _ in range(3)]
        print(f"launch+record {case:7} BPF programs {[round(x) for x in xs]} ns/iteration",
              flush=True)


if __name__ == "__main__":
    main()
