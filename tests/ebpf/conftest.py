"""Builds the fake CUDA libraries and the workloads once per session (gcc/g++), and
drives workload processes that wait on stdin until the probes are attached."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Exporter, eventually, find, parse, require_tool

CSRC = Path(__file__).parent / "csrc"


@dataclass(frozen=True)
class Build:
    dir: Path

    def path(self, name: str) -> str:
        return str(self.dir / name)


def build_into(out: Path) -> Build:
    """libcuda.so.1, libcudart.so.12 (which calls the driver like the real one) and the
    programs, all with an $ORIGIN rpath so a copy of the folder uses its own copies."""
    gcc, gxx = require_tool("gcc"), require_tool("g++")
    out.mkdir(parents=True, exist_ok=True)
    rpath = "-Wl,-rpath,$ORIGIN"
    steps = [
        [gcc, "-O0", "-Wall", "-Werror", "-shared", "-fPIC", "-o", "libcuda.so.1",
         str(CSRC / "fake_cuda.c"),
         "-Wl,-soname,libcuda.so.1"],
        ["ln", "-sf", "libcuda.so.1", "libcuda.so"],
        [gcc, "-O0", "-shared", "-fPIC", "-o", "libcudart.so.12", str(CSRC / "fake_cudart.c"),
         "-Wl,-soname,libcudart.so.12", "-L.", "-lcuda", rpath],
        ["ln", "-sf", "libcudart.so.12", "libcudart.so"],
        [gxx, "-O0", "-o", "workload", str(CSRC / "workload.cpp"), "-L.", "-lcudart", "-lcuda",
         rpath, "-pthread"],
        [gcc, "-O0", "-o", "driver_only", str(CSRC / "driver_only.c"), "-L.", "-lcuda", rpath],
        # The runtime linked statically into the program (no libcudart*.so mapped): found
        # because the executable itself defines cudaLaunchKernel.
        [gcc, "-O0", "-c", "-fPIC", "-o", "cudart_static.o", str(CSRC / "fake_cudart.c")],
        [gxx, "-O0", "-o", "wl_static", str(CSRC / "workload.cpp"), "cudart_static.o", "-L.",
         "-lcuda", rpath, "-pthread"],
        [gcc, "-O0", "-o", "launch_loop", str(CSRC / "launch_loop.c"), "-L.", "-lcudart",
         "-lcuda", rpath],
        [gcc, "-O0", "-o", "devices", str(CSRC / "devices.c"), "-L.", "-lcudart", "-lcuda",
         rpath, "-pthread"],
        [gcc, "-O0", "-o", "graphs", str(CSRC / "graphs.c"), "-L.", "-lcudart", "-lcuda",
         rpath],
        # CUDA 13's runtime, whose cudaGraphAddNode takes the edge data before the count;
        # stripped as NVIDIA's is (its symbols' names only in .dynstr, suffixes merged).
        [gcc, "-O0", "-DFAKE_CUDART_13", "-shared", "-fPIC", "-s", "-o", "libcudart.so.13",
         str(CSRC / "fake_cudart.c"), "-Wl,-soname,libcudart.so.13", "-L.", "-lcuda", rpath],
        [gcc, "-O0", "-DFAKE_CUDART_13", "-Wall", "-Werror", "-o", "graphs13",
         str(CSRC / "graphs13.c"), "-L.", "-l:libcudart.so.13", "-lcuda", rpath],
        [gcc, "-O0", "-o", "offsets", str(CSRC / "offsets.c")],
        [gcc, "-O0", "-Wall", "-Werror", "-o", "copies", str(CSRC / "copies.c"), "-L.",
         "-lcudart", "-lcuda", rpath],
        [gcc, "-O0", "-o", "dlopen_driver", str(CSRC / "dlopen_driver.c"), "-ldl"],
        [gcc, "-O0", "-Wall", "-Werror", "-o", "stepper", str(CSRC / "stepper.c"), "-L.",
         "-lcudart", "-lcuda", rpath],
        # Completion points on the simulated GPU clock (issue #27)
        [gcc, "-O0", "-Wall", "-Werror", "-o", "completion", str(CSRC / "completion.c"),
         "-L.", "-lcudart", "-lcuda", rpath, "-pthread"],
    ]
    for cmd in steps:
        res = subprocess.run(cmd, cwd=out, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stderr}"
    return Build(out)


@pytest.fixture(scope="session")
def cuda_build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    return build_into(tmp_path_factory.mktemp("cuda-fake"))


def fresh_copy(build: Build, into: Path, programs: Sequence[str] = ("workload",)) -> Path:
    """The libraries and programs copied into a new folder: new files (inodes) that no
    probe has seen, as a new container image or a new install brings."""
    into.mkdir(parents=True, exist_ok=True)
    for name in ("libcuda.so.1", "libcudart.so.12", *programs):
        shutil.copy2(build.dir / name, into / name)
    return into


def probe_address(pid: int, file: str, symbol: str) -> int:
    """Where `symbol` of `file` is in the memory of process `pid`."""
    from gpu_exporter.sources.ebpf.elf import ElfFile
    from gpu_exporter.sources.ebpf.libraries import read_maps

    elf = ElfFile.open(file)
    offset = elf.offset_of_vaddr(elf.functions([symbol])[symbol])
    assert offset is not None
    ino = Path(file).stat().st_ino
    for m in read_maps("/proc", pid):
        if m.file[1] == ino and m.offset <= offset < m.offset + (m.end - m.start):
            return m.start + offset - m.offset
    raise AssertionError(f"{file} is not mapped by {pid}")


def breakpoint_set(pid: int, address: int) -> bool:
    """True while a uprobe is registered there: the kernel writes an int3 (0xcc) over the
    first instruction in every process that maps the file, and restores it on detach."""
    with open(f"/proc/{pid}/mem", "rb") as mem:
        mem.seek(address)
        return mem.read(1) == b"\xcc"


def copy_program(build: Build, program: str, as_name: str) -> str:
    """The same program under another executable name (process_executable_name)."""
    dst = build.dir / as_name
    if not dst.exists():
        shutil.copy2(build.dir / program, dst)
    return str(dst)


class Workload:
    """A workload process that has mapped the libraries and waits for "go"."""

    def __init__(self, argv: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.proc = subprocess.Popen(
            [*argv, "--wait"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", f"{argv}: {line!r} {self.proc.stderr}"

    def go(self, timeout: float = 60) -> None:
        out, err = self.proc.communicate("go\n", timeout=timeout)
        assert self.proc.returncode == 0, f"{self.argv} exited {self.proc.returncode}: {err}"
        assert out.strip().endswith("done"), out


def probe_points(lib: str, symbol: str) -> list[Any]:
    """The collector's entry and return probes of `symbol` in `lib`, as it attaches them
    (uprobes.Point, with the probe's cookie)."""
    from gpu_exporter.model import ebpf_abi as abi
    from gpu_exporter.sources.ebpf import uprobes
    from gpu_exporter.sources.ebpf.elf import ElfFile

    elf = ElfFile.open(lib)
    offset = elf.offset_of_vaddr(elf.functions([symbol])[symbol])
    assert offset is not None
    probe = abi.BY_SYMBOL[symbol]
    cookie = abi.cookie(abi.INDEX[symbol])
    return [uprobes.Point(offset, probe.program, False, cookie),
            uprobes.Point(offset, abi.return_program(probe), True, cookie)]


@contextmanager
def engine() -> Iterator[Any]:
    """The collector's eBPF engine in this process (probes.Engine, started: probes on the
    CUDA files mapped now, its event loop running), with process ids, rescanned only when
    the test says; closed after."""
    import bcc

    from gpu_exporter.sources.ebpf.engine import Engine

    e = Engine("/proc", names_max=64, pid_label=True, rescan_interval=3600)
    e.start(bcc)
    try:
        yield e
    finally:
        e.close()


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 20) -> None:
    eventually(cond, timeout, what)


def attached(exp: Exporter) -> set[str]:
    series = parse(exp.scrape())
    return {s.labels["library"] for s in find(series, "gpu_exporter_ebpf_attached_libraries")
            if s.value == 1}


def wait_attached(exp: Exporter, build_dir: Path | str) -> None:
    want = {f"{build_dir}/libcuda.so.1", f"{build_dir}/libcudart.so.12"}
    wait_until(lambda: want <= attached(exp), f"probes on {want}")


def only_ebpf_args() -> list[str]:
    from gpu_exporter.collectors import REGISTRY

    return [f"--no-collector.{c.name}" for c in REGISTRY if c.name != "ebpf"]


# --- HIP (AMD): the fake libamdhip64.so.5 and programs built by the real hipcc ---------
HIP_FIXTURES = Path(__file__).parent.parent / "fixtures" / "hip"
HIP_LIB = "libamdhip64.so.5"


def hip_version_script(symbols: Sequence[str]) -> str:
    """The fake's version script: each symbol under the version node the real library
    (ROCm 5.2.3) defines it in, or, newer, the node ROCm/clr's script lists it in: a
    program hipcc links against the real library then binds to the fake's."""
    nodes: dict[str, str] = {}
    for line in (HIP_FIXTURES / "real-symbols-5.2.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, node = line.partition("@")
            nodes[name] = node
    node = ""
    for raw in (HIP_FIXTURES / "hip_hcc.map.in-7.2").read_text().splitlines():
        line = raw.strip()
        if line.startswith("hip_") and line.endswith("{"):
            node = line.split()[0]
        elif line.endswith(";") and not line.startswith(("}", "*", "local", "global")):
            nodes.setdefault(line[:-1], node)
    by_node: dict[str, list[str]] = {}
    for s in symbols:
        if s in nodes:
            by_node.setdefault(nodes[s], []).append(s)
    out = []
    for i, (n, names) in enumerate(sorted(by_node.items())):
        local = "local: *;" if i == 0 else ""
        out.append(f"{n} {{ global: {' '.join(x + ';' for x in names)} {local} }};")
    return "\n".join(out) + "\n"


def build_hip_into(out: Path) -> Build:
    """libamdhip64.so.5 (fake, same soname and version nodes as AMD's) and hip_workload,
    built by the real hipcc for gfx90a with an $ORIGIN rpath (so the fake beside it is
    loaded); real/hip_workload is the same program beside no fake: it runs AMD's real
    library (installed with hipcc), which fails every call here (no GPU)."""
    gxx, hipcc = require_tool("g++"), require_tool("hipcc")
    require_tool("nm")
    out.mkdir(parents=True, exist_ok=True)
    (out / "real").mkdir(exist_ok=True)

    def run(cmd: list[str], env: dict[str, str] | None = None) -> str:
        res = subprocess.run(cmd, cwd=out, capture_output=True, text=True, timeout=300,
                             env={**os.environ, **(env or {})})
        assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stderr}"
        return res.stdout

    run([gxx, "-O0", "-Wall", "-Werror", "-D__HIP_PLATFORM_AMD__", "-fPIC", "-c", "-o",
         "fake_hip.o", str(CSRC / "fake_hip.cpp")])
    symbols = [line.split()[-1] for line in
               run(["nm", "-g", "--defined-only", "fake_hip.o"]).splitlines()]
    (out / "fake_hip.map").write_text(hip_version_script(symbols))
    run([gxx, "-shared", "-o", HIP_LIB, "fake_hip.o", f"-Wl,-soname,{HIP_LIB}",
         "-Wl,--version-script=fake_hip.map"])
    # HIP_PLATFORM: hipcc picks NVIDIA's platform where an nvcc is on the PATH.
    run([hipcc, "--offload-arch=gfx90a", "-O1", "-Wno-deprecated-declarations", "-o",
         "hip_workload", str(CSRC / "hip_workload.hip"), "-Wl,-rpath,$ORIGIN"],
        {"HIP_PLATFORM": "amd"})
    shutil.copy2(out / "hip_workload", out / "real" / "hip_workload")
    # Bad input: a 64 KiB kernel name; kernels of a library dlopened after the start, whose
    # names only their registration tells (no symbol of them is left: a version script
    # keeps launch_late alone, and the library is stripped).
    hip = [hipcc, "--offload-arch=gfx90a", "-O1", "-Wl,-rpath,$ORIGIN"]
    amd = {"HIP_PLATFORM": "amd"}
    run([*hip, "-o", "hip_long_name", str(CSRC / "hip_long_name.hip")], amd)
    (out / "only_launch.map").write_text("{ global: launch_late; local: *; };\n")
    run([*hip, "-shared", "-fPIC", "-fvisibility=hidden", "-s", "-o", "libhip_dl_kernels.so",
         str(CSRC / "hip_dl_kernels.hip"), "-Wl,--version-script=only_launch.map"], amd)
    run([*hip, "-o", "hip_dlopen", str(CSRC / "hip_dlopen.hip"), "-ldl"], amd)
    run([*hip, "-o", "hip_launch_loop", str(CSRC / "hip_launch_loop.hip")], amd)  # (bench)
    run([*hip, "-o", "hip_devices", str(CSRC / "hip_devices.hip"), "-ldl"], amd)
    run([*hip, "-o", "hip_completion", str(CSRC / "hip_completion.hip")], amd)
    run([*hip, "-o", "hip_many", str(CSRC / "hip_many.hip")], amd)  # (the drill of 1,000)
    # The runtime stripped (only its dynamic symbols left), beside a copy of the workload.
    (out / "stripped").mkdir(exist_ok=True)
    shutil.copy2(out / HIP_LIB, out / "stripped" / HIP_LIB)
    run([require_tool("strip"), "-s", f"stripped/{HIP_LIB}"])
    shutil.copy2(out / "hip_workload", out / "stripped" / "hip_stripped")
    return Build(out)


@pytest.fixture(scope="session")
def hip_build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    return build_hip_into(tmp_path_factory.mktemp("hip-fake"))
