"""Unit tests of the pieces the probes rely on: every decoding offset against the
compiler's own layout, ELF symbol lookup, demangling, the name cap, /proc maps parsing,
and the log2-to-cumulative bucket conversion."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import subprocess

import pytest

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.sources.ebpf.elf import ElfError, ElfFile, read_symbols
from gpu_exporter.sources.ebpf.libraries import _NAMED, parse_maps
from gpu_exporter.sources.ebpf.loader import (
    DEFAULT_TRACEPOINT_OFFSETS,
    program_text,
    tracepoint_offsets,
)
from gpu_exporter.sources.ebpf.names import OTHER, UNKNOWN, NameCap, demangle, kernel_name
from gpu_exporter.sources.ebpf.reading import BYTES_BOUNDS_LOG2, cumulative
from tests.ebpf.conftest import CSRC, Build
from tests.helpers import REPO


@pytest.fixture(scope="module")
def offsets(cuda_build: Build) -> dict[str, list[int]]:
    out = subprocess.run([cuda_build.path("offsets")], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    return {line.split()[0]: [int(x) for x in line.split()[1:]] for line in out.splitlines()}


def test_launch_config_struct_offsets(offsets: dict[str, list[int]]) -> None:
    for name in ("LCFG_GRID_OFF", "LCFG_BLOCK_OFF", "LCFG_SMEM_OFF", "LCFG_STREAM_OFF",
                 "CULCFG_GRID_OFF", "CULCFG_BLOCK_OFF", "CULCFG_SMEM_OFF",
                 "CULCFG_STREAM_OFF"):
        assert offsets[name] == [getattr(abi, name)], name
    assert offsets["DIM3_SIZE"] == [12]


def _words(offsets: dict[str, list[int]], fn: str) -> tuple[list[int], list[int]]:
    """(argument registers rdi..r9, stack slots 1..3) at the callee's first instruction."""
    w = offsets[fn]
    return w[:6], [0, *w[6:]]  # stack slot 0 is the return address


def test_cuda_launch_kernel_registers_and_stack(offsets: dict[str, list[int]]) -> None:
    # cudaLaunchKernel(0x1111, dim3{3,5,7}, dim3{32,4,2}, 0x2222, 4096, 0x5000)
    regs, stack = _words(offsets, "cudaLaunchKernel")
    assert regs[0] == 0x1111  # PARM1: the host function
    assert regs[1] == 3 | 5 << 32 and regs[2] & 0xFFFFFFFF == 7  # grid: x|y, then z
    assert regs[3] == 32 | 4 << 32 and regs[4] & 0xFFFFFFFF == 2  # block: x|y, then z
    assert regs[5] == 0x2222  # args
    assert stack[abi.RT_LAUNCH_SHARED_STACK_SLOT] == 4096
    assert stack[abi.RT_LAUNCH_STREAM_STACK_SLOT] == 0x5000


def test_cu_launch_kernel_registers_and_stack(offsets: dict[str, list[int]]) -> None:
    # cuLaunchKernel(0x1111, 3, 5, 7, 32, 4, 2, 4096, 0x5000, 0x2222, 0x3333)
    regs, stack = _words(offsets, "cuLaunchKernel")
    assert [r & 0xFFFFFFFF for r in regs] == [0x1111, 3, 5, 7, 32, 4]
    assert stack[abi.CU_LAUNCH_BZ_STACK_SLOT] & 0xFFFFFFFF == 2
    assert stack[abi.CU_LAUNCH_SHARED_STACK_SLOT] & 0xFFFFFFFF == 4096
    assert stack[abi.CU_LAUNCH_STREAM_STACK_SLOT] == 0x5000


def test_memcpy_size_and_kind_registers(offsets: dict[str, list[int]]) -> None:
    regs, _ = _words(offsets, "cudaMemcpy")
    assert regs[2] == 12345  # PARM3: count
    assert regs[3] & 0xFFFFFFFF == abi.MEMCPY_DEVICE_TO_HOST == 2  # PARM4: kind


@pytest.mark.parametrize(("fn", "pos"), [
    ("cudaMemcpy2DAsync", abi.RT_2D_WIDTH_ARG),
    ("cudaMemcpy2DToArrayAsync", abi.RT_2D_ARRAY_WIDTH_ARG),
    ("cudaMemcpy2DFromArrayAsync", abi.RT_2D_ARRAY_WIDTH_ARG),
    ("cudaMemcpy2DArrayToArray", abi.RT_2D_ARRAY_TO_ARRAY_WIDTH_ARG),
])
def test_2d_copy_width_height_kind_positions(offsets: dict[str, list[int]], fn: str,
                                             pos: int) -> None:
    # width 111, height 222, kind DeviceToHost: arguments pos, pos + 1, pos + 2 (1-based;
    # 7 and on are stack slots 1 and on), as copy_2d reads them for the probe's pos
    args = offsets[fn]
    assert (args[pos - 1], args[pos], args[pos + 1] & 0xFFFFFFFF) == (111, 222, 2), args
    assert {p.pos for p in abi.ALL_PROBES if p.call == fn.removesuffix("Async")} == {pos}


def test_peer_copy_byte_count_is_the_fifth_argument(offsets: dict[str, list[int]]) -> None:
    for fn in ("cudaMemcpyPeerAsync", "cuMemcpyPeerAsync"):
        assert offsets[fn][4] == 12345, fn


def test_3d_and_driver_copy_struct_offsets(offsets: dict[str, list[int]]) -> None:
    for name in ("RT3D_SRC_ARRAY_OFF", "RT3D_DST_ARRAY_OFF", "RT3D_EXTENT_OFF",
                 "RT3D_KIND_OFF", "RT3D_SIZE", "RT3DPEER_DST_ARRAY_OFF", "RT3DPEER_EXTENT_OFF",
                 "RT3DPEER_SIZE", "CU2D_SRC_TYPE_OFF", "CU2D_DST_TYPE_OFF", "CU2D_SIZE"):
        assert offsets[name] == [getattr(abi, name)], name
    assert offsets["RT3DPEER_SRC_ARRAY_OFF"] == [abi.RT3D_SRC_ARRAY_OFF]
    # width, then height (and depth) right after it, as the programs read them
    assert offsets["CU2D_WIDTH_OFF"] == [abi.CU2D_WIDTH_OFF, abi.CU2D_WIDTH_OFF + 8]
    # CUDA_MEMCPY3D and CUDA_MEMCPY3D_PEER: the same offsets
    assert offsets["CU3D_SRC_TYPE_OFF"] == [abi.CU3D_SRC_TYPE_OFF] * 2
    assert offsets["CU3D_DST_TYPE_OFF"] == [abi.CU3D_DST_TYPE_OFF] * 2
    w = abi.CU3D_WIDTH_OFF
    assert offsets["CU3D_WIDTH_OFF"] == [w, w + 8, w + 16] * 2
    assert offsets["CU3D_SIZE"] == [abi.CU3D_SIZE] * 2
    assert offsets["CU_MEMORYTYPE"] == [abi.CU_MEMORYTYPE_HOST, abi.CU_MEMORYTYPE_DEVICE,
                                        abi.CU_MEMORYTYPE_ARRAY, abi.CU_MEMORYTYPE_UNIFIED]


def test_graph_node_struct_offsets(offsets: dict[str, list[int]]) -> None:
    assert offsets["KNODE_FUNC_OFF"] == [abi.KNODE_FUNC_OFF] * 2
    assert offsets["KNODE_KERN_OFF"] == [abi.KNODE_KERN_OFF]
    # the kernel's parameters and the child graph at the same place of the union
    assert offsets["NODE_PARAMS_KERNEL_OFF"] == [abi.NODE_PARAMS_KERNEL_OFF] * 4
    assert abi.CHILD_GRAPH_OFF == 0


def test_memcpy_kind_enum_and_names() -> None:
    assert abi.MEMCPY_KIND_NAMES == {0: "HostToHost", 1: "HostToDevice", 2: "DeviceToHost",
                                     3: "DeviceToDevice", 4: "Default"}
    header = (CSRC / "cuda_fake.h").read_text()
    for value, name in abi.MEMCPY_KIND_NAMES.items():
        assert f"cudaMemcpy{name} = {value}" in header


def test_program_uses_only_defined_constants() -> None:
    defined = {d[2:].split("=")[0].split("(")[0] for d in abi.defines()}
    defined |= set(re.findall(r"#define ([A-Z_]+)", program_text()))
    defined |= set(DEFAULT_TRACEPOINT_OFFSETS)
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", program_text(), flags=re.S)
    used = set(re.findall(r"\b([A-Z][A-Z0-9_]{3,})\b", code))
    not_ours = {"BPF_HASH", "BPF_ARRAY", "BPF_PERCPU_ARRAY", "BPF_QUEUE", "BPF_RINGBUF_OUTPUT",
                "BPF_PROG_ARRAY",
                "PT_REGS_PARM1", "PT_REGS_PARM2", "PT_REGS_PARM3", "PT_REGS_PARM4", "PT_REGS_PARM5",
                "PT_REGS_PARM6", "PT_REGS_SP", "PT_REGS_RC", "E2BIG", "BPF_TASK_STORAGE",
                "BPF_LOCAL_STORAGE_GET_F_CREATE",
                "FRAMES_ONLY"}  # a benchmark's variant (tests/bench/test_ebpf_overhead.py)
    assert used - not_ours <= defined, used - not_ours - defined
    assert len(set(abi.DROP_NAMES)) == abi.DROP_REASONS


def test_tracepoint_record_offsets_read_from_tracefs() -> None:
    # The kernel's own format files (tracefs is mounted by the test host set-up) agree
    # with the x86-64 layout used when they cannot be read.
    offsets, problem = tracepoint_offsets()
    assert problem is None
    assert offsets == DEFAULT_TRACEPOINT_OFFSETS


def test_every_probe_names_a_program_in_the_source() -> None:
    text = program_text()
    for program in (*abi.ENTRY_PROGRAMS, abi.RETURN_PROGRAM, abi.RETURN_PROGRAM_DRIVER):
        assert (f"int {program}(struct pt_regs *ctx)" in text
                or f"\nENTRY({program}, OP_" in text
                or f"\nENTRY_FILLED({program}, OP_" in text
                or f"\nKEEP_ARGS({program}, OP_" in text), program
    assert len(abi.ALL_PROBES) < 1 << 16 and all(p.arg < 1 << 8 for p in abi.ALL_PROBES)


def test_probed_symbols_are_what_the_real_cuda_libraries_export() -> None:
    """Against NVIDIA's real libcudart 11.8 and libcuda 535, recorded by
    scripts/gen-cuda-errors.py: a misspelt symbol, or one on the wrong side, fails here."""
    recorded = {}
    for line in (REPO / "tests/fixtures/cuda/real-symbols.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            symbol, side = line.split()
            recorded[symbol] = side
    for p in abi.RUNTIME_PROBES + abi.DRIVER_PROBES:
        if p.since:
            assert p.symbol not in recorded, p  # really newer than the recorded libraries
            continue
        assert recorded.get(p.symbol) == ("driver" if p.driver else "runtime"), p


def test_runtime_probes_are_what_cuda_13s_runtime_exports() -> None:
    """Against NVIDIA's libcudart.so.13 (13.0 and the newest 13.x), recorded by
    scripts/gen-cuda13-symbols.py: a probe newer than 13.0 is exported from its release
    on, and the only probed names CUDA 13 does not export are the two it dropped."""
    rows = [line.split() for line in
            (REPO / "tests/fixtures/cuda/real-symbols-13.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    assert rows[0][0] == "releases"
    releases, exported = rows[0][1:], {row[0]: row[1:] for row in rows[1:]}
    assert set(exported) == {p.symbol for p in abi.RUNTIME_PROBES}  # the fixture is fresh
    assert {s for s, found in exported.items() if not found} == {
        "cudaGraphAddNode_v2", "cudaGetDeviceProperties_v2"}

    def version(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in v.split("."))
    for p in abi.RUNTIME_PROBES:
        if exported[p.symbol] and p.since.startswith("13."):
            assert exported[p.symbol] == [
                r for r in releases if version(r) >= version(p.since)], p


def test_a_symbol_whose_name_is_the_tail_of_another_is_found(cuda_build: Build) -> None:
    """The linker keeps `cudaLaunchKernel` only as the end of `__cudaLaunchKernel` in a
    stripped runtime's string table (NVIDIA's libcudart.so.12 and .13 too)."""
    lib = cuda_build.path("libcudart.so.13")
    found = ElfFile.open(lib).functions(["cudaLaunchKernel", "__cudaLaunchKernel"])
    assert set(found) == {"cudaLaunchKernel", "__cudaLaunchKernel"}
    assert found["cudaLaunchKernel"] != found["__cudaLaunchKernel"]
    symbols = ElfFile.open(lib).symbols()
    assert symbols.function_at(found["cudaLaunchKernel"]) == "cudaLaunchKernel"


def test_cookies_say_which_call_and_which_side() -> None:
    for i, p in enumerate(abi.ALL_PROBES):
        c = abi.cookie(i)
        assert (c & 0xFFFF, c >> 16 & 0xFF, c >> 24 & 1, c >> 25 & 0x1F) == (
            i, p.arg, int(p.driver), p.pos)
        assert c >> 30 & 1 == int(p.hip) == int(p in abi.HIP_PROBES)
        # a per-thread stream entry point: CUDA's _ptsz, HIP's _spt
        assert c >> 31 == int(p.symbol.endswith("_ptsz" if not p.hip else "_spt"))
        assert c < 1 << 32  # a frame keeps it in 32 bits
        if not p.hip:
            assert p.driver == (p in abi.DRIVER_PROBES) == bool(re.match(r"cu[A-Z]", p.symbol))


@pytest.mark.parametrize(("symbol", "call"), [
    ("cuMemcpyHtoDAsync_v2_ptsz", "cuMemcpyHtoDAsync"),
    ("cudaMemcpy_ptds", "cudaMemcpy"),
    ("cuMemAlloc_v2", "cuMemAlloc"),
    ("cudaLaunchKernel", "cudaLaunchKernel"),
    ("__cudaGetKernel", "__cudaGetKernel"),
])
def test_cuda_call_is_the_documented_name(symbol: str, call: str) -> None:
    assert abi.Probe(symbol, "copy").call == call


def test_elf_symbols_and_address_lookup(cuda_build: Build) -> None:
    syms = read_symbols(cuda_build.path("workload"))
    gemm = syms.functions["_ZN2ml4gemmIfLi4EEEvPT_i"]
    assert syms.function_at(gemm) == "_ZN2ml4gemmIfLi4EEEvPT_i"
    assert syms.function_at(gemm + 1) == "_ZN2ml4gemmIfLi4EEEvPT_i"  # inside its body
    # A static function is only in .symtab.
    assert "_ZN12_GLOBAL__N_16helperEv" in syms.functions
    seg = next(s for s in syms.segments if s.vaddr <= gemm < s.vaddr + s.filesz)
    assert syms.vaddr_of_offset(gemm - seg.vaddr + seg.offset) == gemm
    lib = read_symbols(cuda_build.path("libcudart.so.12"))
    assert {"cudaLaunchKernel", "cudaMemcpy", "__cudaGetKernel"} <= set(lib.functions)
    assert "cuLaunchKernel" not in lib.functions  # imported, not defined
    with pytest.raises(ElfError):
        read_symbols(str(CSRC / "cuda_fake.h"))


@pytest.mark.parametrize(("symbol", "name"), [
    ("_ZN2ml4gemmIfLi4EEEvPT_i", "ml::gemm"),
    ("_Z6vecAddPfS_S_i", "vecAdd"),
    ("_ZN12_GLOBAL__N_16helperEv", "(anonymous namespace)::helper"),
    ("_ZN2ns7Handled3runEi", "ns::Handled::run"),
    ("_ZN6triton9matmul_v2IfLi2EEEvPT_i", "triton::matmul_v2"),
    ("_ZN2ns1SIiE3runEv", "ns::S::run"),  # template arguments of a class
    ("_ZN2nsltERKNS_1AES2_", "ns::operator<"),
    ("_ZNK2ns1A1fEv", "ns::A::f"),  # const member function
    ("kern_007", "kern_007"),  # C names stay
    ("_Znot_valid", "_Znot_valid"),  # not demanglable: kept as the symbol
])
def test_kernel_names(symbol: str, name: str) -> None:
    assert kernel_name(symbol) == name


def test_demangle_is_libstdcxx() -> None:
    assert demangle("_ZN2ml4gemmIfLi4EEEvPT_i") == "void ml::gemm<float, 4>(float*, int)"


def test_name_cap_keeps_first_names_and_unknown_is_free() -> None:
    cap = NameCap(2)
    assert [cap.admit(n) for n in ("a", "b", "c", "a", "d", "b")] == [
        "a", "b", OTHER, "a", OTHER, "b"]
    assert cap.admit(UNKNOWN) == UNKNOWN


def test_library_names_matched() -> None:
    for name in ("libcudart.so.12", "libcudart.so", "libcuda.so.1", "libcuda.so.550.54.15",
                 "libcudart-d0da41ae.so.11.0", "libcudart.so.12.4.127"):
        assert _NAMED.match(name), name
    for name in ("libcudadebugger.so.1", "libcudnn.so.9", "libcublas.so.12", "libc.so.6"):
        assert not _NAMED.match(name), name


def test_parse_maps() -> None:
    text = (
        "7f00aa000000-7f00aa010000 r-xp 00002000 fd:01 123456   /usr/lib/libcudart.so.12\n"
        "7f00aa010000-7f00aa020000 rw-p 00000000 00:00 0 \n"
        "7f00ab000000-7f00ab001000 r--p 00000000 00:2a 77  /tmp/x/libcuda.so.1 (deleted)\n"
        "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0  [stack]\n"
    )
    maps = parse_maps(text)
    assert [(m.start, m.offset, m.file, m.path, m.executable) for m in maps] == [
        (0x7F00AA000000, 0x2000, ("fd:01", 123456), "/usr/lib/libcudart.so.12", True),
        (0x7F00AB000000, 0, ("00:2a", 77), "/tmp/x/libcuda.so.1", False),
    ]


def test_log2_slots_to_cumulative_buckets() -> None:
    # slot s holds values in (2^(s-1), 2^s]: 1 -> 0, 2 -> 1, 1000 -> 10, 4096 -> 12
    h = cumulative({0: 1, 1: 2, 10: 3, 12: 1}, total=1 + 4 + 3000 + 4096,
                   bounds_log2=BYTES_BOUNDS_LOG2)
    got = dict(h.buckets)
    assert (got[1], got[4], got[16], got[1024], got[4096], got[math.inf]) == (1, 3, 3, 6, 7, 7)
    assert h.sum == 7101 and h.count == 7
    assert [b for b, _ in h.buckets] == sorted(b for b, _ in h.buckets)
    secs = cumulative({20: 2}, total=2_000_000, bounds_log2=(18, 20, 22), scale=1e-9)
    assert dict(secs.buckets) == {2**18 * 1e-9: 0, 2**20 * 1e-9: 2, 2**22 * 1e-9: 2,
                                  math.inf: 2}
    assert secs.sum == pytest.approx(0.002)


def test_program_that_does_not_compile_is_a_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    """A BPF program that does not build is an operator-visible fault (exit 4), not an
    "unavailable" feature. Real bcc, real clang: only the source text is broken."""
    from gpu_exporter.collectors.base import CollectorFault
    from gpu_exporter.collectors.ebpf import EbpfCollector
    from gpu_exporter.model.settings import Settings
    from gpu_exporter.sources.ebpf import loader

    monkeypatch.setattr(loader, "program_text", lambda: "int broken( {")
    with pytest.raises(CollectorFault, match="failed to compile or load"):
        EbpfCollector(Settings(enabled_collectors=frozenset({"ebpf"}))).start()


def test_bcc_missing_is_unavailable_not_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from gpu_exporter.collectors.ebpf import EbpfCollector
    from gpu_exporter.model.settings import Settings

    monkeypatch.setitem(sys.modules, "bcc", None)  # `import bcc` raises ImportError
    a = EbpfCollector(Settings()).start()
    assert a.state == "unavailable" and "python3-bpfcc" in a.reason


def test_privilege_check() -> None:
    from gpu_exporter.collectors.ebpf import (
        CAP_BPF,
        CAP_PERFMON,
        CAP_SYS_ADMIN,
        missing_privileges,
    )

    assert missing_privileges(1 << CAP_SYS_ADMIN) is None
    assert missing_privileges(1 << CAP_BPF | 1 << CAP_PERFMON) is None
    assert missing_privileges(1 << CAP_BPF) == (
        "missing CAP_PERFMON (run as root or grant them)")
    assert "CAP_BPF and CAP_PERFMON" in (missing_privileges(0) or "")
    assert missing_privileges(None) is not None


def test_names_resolve_after_the_process_exited(cuda_build: Build) -> None:
    """A short-lived process: its maps were seen by a scan, then it exited before its
    first launch was named. The scan's maps and the files opened then still name it."""
    from gpu_exporter.sources.ebpf.libraries import Scanner
    from gpu_exporter.sources.ebpf.resolve import Resolver
    from tests.ebpf.conftest import Workload, copy_program

    w = Workload([copy_program(cuda_build, "workload", "wl_short"), "unknown"])
    pid = w.proc.pid
    found = Scanner("/proc").scan_pid(pid)
    maps = found.cuda_maps[pid]
    exe = next(m for m in maps if m.path.endswith("/wl_short"))
    first = min(m.start - m.offset for m in maps if m.file == exe.file)
    gemm = read_symbols(cuda_build.path("wl_short")).functions["_ZN2ml4gemmIfLi4EEEvPT_i"]
    resolver = Resolver("/proc", NameCap(10))
    resolver.remember(pid, maps)  # opens the files it maps, while they can be opened
    w.go()  # exits
    assert not os.path.exists(f"/proc/{pid}")
    # A PIE's first PT_LOAD has vaddr 0 and file offset 0: address = load base + vaddr.
    assert resolver.symbol_at(pid, first + gemm) == "_ZN2ml4gemmIfLi4EEEvPT_i"
    assert resolver.kernel_label(pid, abi.API_RUNTIME, first + gemm) == "ml::gemm"
    assert resolver.kernel_label(pid, abi.API_RUNTIME, 0x10) == UNKNOWN


def test_probe_table_in_docs_is_generated_from_abi() -> None:
    spec = importlib.util.spec_from_file_location(
        "gen_probe_table", REPO / "scripts" / "gen-probe-table.py")
    assert spec and spec.loader
    probe_table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe_table)
    doc = (REPO / "docs" / "ebpf.md").read_text()
    assert probe_table.update(doc) == doc, "docs/ebpf.md's probe table is stale: run `make docs`"
    # One row per documented call and kind of count; every probed symbol in one of them.
    table = doc.split(probe_table.BEGIN, 1)[1].split(probe_table.END, 1)[0]
    table += doc.split(probe_table.HIP_BEGIN, 1)[1].split(probe_table.HIP_END, 1)[0]
    for p in abi.ALL_PROBES:
        assert f"`{p.symbol}`" in table, p
    assert set(abi.COUNTS) == set(abi.ENTRY_PROGRAMS), "describe every entry program"


def test_family_sources_name_exactly_the_probed_calls() -> None:
    from gpu_exporter.model import catalogue as c

    for family, programs in ((c.GPU_MEMORY_COPIES, abi.COPY_PROGRAMS),
                             (c.GPU_MEMORY_ALLOCATIONS, abi.ALLOC_PROGRAMS),
                             (c.GPU_KERNEL_LAUNCH_CALLS, abi.LAUNCH_PROGRAMS)):
        named = set(family.sources.split(" on ", 1)[1].split(", "))
        assert named == {p.call for p in abi.ALL_PROBES if p.program in programs}, family.name
    kinds = set(abi.LAUNCH_PROGRAMS + abi.COPY_PROGRAMS + abi.ALLOC_PROGRAMS
                + abi.SYNC_PROGRAMS)
    assert kinds <= set(abi.ENTRY_PROGRAMS)


def test_docs_state_how_many_probes_the_real_libraries_take() -> None:
    # Shutdown time on kernels before 6.6 is 0.11 s per probe: docs/ebpf.md says how
    # many NVIDIA's own libraries take, from the symbols recorded from them.
    sides = [line.split()[1] for line in
             (REPO / "tests/fixtures/cuda/real-symbols.txt").read_text().splitlines()
             if line and not line.startswith("#")]
    rt, drv = 2 * sides.count("runtime"), 2 * sides.count("driver")
    doc = " ".join((REPO / "docs" / "ebpf.md").read_text().split())
    assert f"take {rt + drv} probes together ({rt} and {drv})" in doc


def test_compiler_pages_given_back_after_compiling_and_programs_still_load() -> None:
    import bcc

    from gpu_exporter.sources.ebpf import compiler_pages, uprobes
    from gpu_exporter.sources.ebpf.loader import load_bpf, uprobe_programs

    bpf = load_bpf(bcc)
    try:
        compiler = [m for m in compiler_pages.mappings()
                    if os.path.basename(m.path).startswith(compiler_pages.COMPILER_LIBRARIES)]
        assert compiler, "bcc maps clang and LLVM"
        clean = [m for m in compiler if "w" not in m.perms and m.anonymous_kb == 0]
        # tens of MB of their code were resident while compiling; none is now
        assert sum(m.rss_kb for m in clean) < 1024, clean
        uprobes.mechanism(uprobes.UPROBE_MULTI, bpf, bcc).load(uprobe_programs())
    finally:
        bpf.cleanup()


def test_every_sync_call_is_named_once_by_its_probes() -> None:
    calls = {v for k, v in vars(abi).items() if k.startswith("SYNC_") and isinstance(v, int)}
    assert set(abi.SYNC_NAMES) == calls
    assert len(set(abi.SYNC_NAMES.values())) == len(calls)
