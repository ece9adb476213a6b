"""What the building blocks of a launch's BPF programs cost on this machine (`make bench`,
root): one-off entry and return programs on the fake `cuLaunchKernel`, driven by the
driver launch loop, each program's own run time from the kernel's BPF statistics, less
that of no-op programs on the same points. The numbers behind the choices in
gpu_exporter/sources/ebpf/program.c (per-thread state by key, not task-local storage; one read
of the user stack per driver launch), reported in docs/performance.md."""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from tests.bench.conftest import Results
from tests.bench.test_ebpf_overhead import CALLS, _bpf_stats, _loop, _run_time_ns
from tests.ebpf.conftest import Build, build_into

ROUNDS = 3
PRELUDE = r"""
#include <uapi/linux/ptrace.h>
struct st { u64 a, b, key; };
BPF_TASK_STORAGE(ts, struct st);
BPF_ARRAY(table, struct st, 4096);
BPF_ARRAY(hits, u64, 2);  // [0] entries, [1] returns that found their state
static __always_inline struct st *one(void) { u32 z = 0; return table.lookup(&z); }
static __always_inline void hit(u32 side) {
    u64 *n = hits.lookup(&side);
    if (n)
        __sync_fetch_and_add(n, 1);
}
static __always_inline u64 regs_key(void *regs) {  // as gpu_exporter/sources/ebpf/program.c's
    u64 key = 0;
    __sync_fetch_and_add(&key, (u64)regs);
    return key;
}
static __always_inline struct st *by_key(void *ctx) {
    u64 key = regs_key(ctx);
    u32 i = ((key >> 14) * 0x9E3779B97F4A7C15ULL) >> 52;
    struct st *s = table.lookup(&i);
    return s && s->key == key ? s : 0;
}
static __always_inline struct st *by_tid(void) {
    u32 tid = bpf_get_current_pid_tgid();
    u32 i = tid & 4095;
    struct st *s = table.lookup(&i);
    return s && s->key == tid ? s : 0;
}
"""
# name: (entry body, return body); each stores what it got, so nothing is optimised away.
VARIANTS: dict[str, tuple[str, str]] = {
    "noop": ("", ""),
    "task_storage_entry_and_return": (
        "struct st *s = ts.task_storage_get((struct task_struct *)bpf_get_current_task_btf(),"
        " 0, BPF_LOCAL_STORAGE_GET_F_CREATE); if (s) hit(0);",
        "struct st *s = ts.task_storage_get((struct task_struct *)bpf_get_current_task_btf(),"
        " 0, 0); if (s) hit(1);"),
    "table_by_thread_id_entry_and_return": (
        "struct st *s = by_tid(); if (s) hit(0); else { u32 tid = bpf_get_current_pid_tgid();"
        " u32 i = tid & 4095; s = table.lookup(&i); if (s) s->key = tid; }",
        "struct st *s = by_tid(); if (s) hit(1);"),
    "table_by_regs_key_entry_and_return": (
        "struct st *s = by_key(ctx); if (s) hit(0); else { u64 k = regs_key(ctx);"
        " u32 i = ((k >> 14) * 0x9E3779B97F4A7C15ULL) >> 52; s = table.lookup(&i);"
        " if (s) s->key = k; }",
        "struct st *s = by_key(ctx); if (s) hit(1);"),
    "user_stack_read": (
        "u64 v = 0; bpf_probe_read_user(&v, 8, (void *)PT_REGS_SP(ctx) + 8);"
        " struct st *s = one(); if (s) s->a = v;", ""),
    "user_stack_read_twice": (
        "u64 v = 0, w = 0; bpf_probe_read_user(&v, 8, (void *)PT_REGS_SP(ctx) + 8);"
        " bpf_probe_read_user(&w, 8, (void *)PT_REGS_SP(ctx) + 24);"
        " struct st *s = one(); if (s) { s->a = v; s->b = w; }", ""),
    "kernel_read": (
        "u64 v = 0; bpf_probe_read_kernel(&v, 8, (void *)&ctx->sp);"
        " struct st *s = one(); if (s) s->a = v;", ""),
    "helper_pid_tgid": ("struct st *s = one(); if (s) s->a = bpf_get_current_pid_tgid();", ""),
}


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    return build_into(tmp_path_factory.mktemp("bench-primitives"))


def _program_ns(build: Build, entry: str, ret: str) -> tuple[float, int]:
    """Nanoseconds of program run time per launch, and how many runs there were."""
    import bcc

    from gpu_exporter.sources.ebpf import uprobes
    from gpu_exporter.sources.ebpf.elf import ElfFile

    text = (PRELUDE + f"int ent(struct pt_regs *ctx) {{ {entry} return 0; }}\n"
            f"int ret(struct pt_regs *ctx) {{ {ret} return 0; }}\n")
    bpf = bcc.BPF(text=text.encode())
    try:
        mech = uprobes.mechanism(uprobes.UPROBE_MULTI, bpf, bcc)
        mech.load(["ent", "ret"])
        lib = build.path("libcuda.so.1")
        elf = ElfFile.open(lib)
        offset = elf.offset_of_vaddr(elf.functions(["cuLaunchKernel"])["cuLaunchKernel"])
        assert offset is not None
        points = [uprobes.Point(offset, "ent", False, 0), uprobes.Point(offset, "ret", True, 0)]
        fds = [bpf.funcs[n].fd for n in (b"ent", b"ret")]
        with _bpf_stats():
            before = sum(_run_time_ns(fd) for fd in fds)
            a = mech.attach(lib, points)
            try:
                _loop(build, "driver")
            finally:
                mech.detach([a])
            spent = sum(_run_time_ns(fd) for fd in fds) - before
        runs = sum(int(v.value) for v in bpf[b"hits"].values())
        return spent / CALLS, runs
    finally:
        bpf.cleanup()


@pytest.mark.bench
def test_primitive_costs(benchmark: Any, results: Results, build: Build) -> None:
    ns: dict[str, list[float]] = {name: [] for name in VARIANTS}
    counted: dict[str, int] = {}

    def interleaved() -> None:
        for _ in range(ROUNDS):
            for name, (entry, ret) in VARIANTS.items():
                t, counted[name] = _program_ns(build, entry, ret)
                ns[name].append(t)

    benchmark.pedantic(interleaved, rounds=1, iterations=1)
    floor = statistics.median(ns["noop"])
    for name in VARIANTS:
        row = {"program_ns_per_launch": statistics.median(ns[name]),
               "above_noop_ns": statistics.median(ns[name]) - floor, "rounds": ROUNDS,
               "calls": CALLS}
        results.put("ebpf_primitives", name, row)
        print(f"\n{name:38} {row['program_ns_per_launch']:6.1f} ns per launch, "
              f"{row['above_noop_ns']:+6.1f} above no-op programs")
    # The per-thread lookups found their state on every call after the first (entry) and
    # on every return (each found one counts a hit, alike in all three, about 2 ns).
    for name in ("task_storage_entry_and_return", "table_by_thread_id_entry_and_return",
                 "table_by_regs_key_entry_and_return"):
        assert counted[name] >= 2 * CALLS - 1, (name, counted[name])
