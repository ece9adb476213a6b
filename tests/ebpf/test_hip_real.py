"""AMD's real HIP runtime (Debian's libamdhip64.so.5, ROCm 5.2.3; no GPU here): every probe
of the table that this library exports attaches to it, and a program built by the real
hipcc, whose every call fails for lack of a GPU, has each probed call counted as an error
under the name the library gives its code (hipErrorInvalidDevice), and nothing as work."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.sources.ebpf.elf import ElfFile
from tests.ebpf.conftest import Build, Workload, attached, copy_program, only_ebpf_args
from tests.ebpf_parts.test_hip_table import device_prop_offsets
from tests.helpers import Series, eventually, exporter, find, parse, require_tool

REAL = "/usr/lib/x86_64-linux-gnu/libamdhip64.so.5"


@dataclass(frozen=True)
class Run:
    series: list[Series]
    logs: str
    path: str  # the real library's file, as the workload maps it


def errors(r: Run) -> dict[tuple[str, str], float]:
    return {(x.labels["cuda_call"], x.labels["error_type"]): x.value
            for x in find(r.series, "gpu_cuda_errors_total", process_executable_name="hip_real")}


@pytest.fixture(scope="module")
def run(hip_build: Build) -> Iterator[Run]:
    require_tool("hipcc")
    assert os.path.exists(REAL), f"{REAL} is missing: scripts/apt-packages.txt installs it"
    path = os.path.realpath(REAL)
    real_dir = hip_build.dir / "real"
    prog = copy_program(Build(real_dir), "hip_workload", "hip_real")
    args = [*only_ebpf_args(), "--collector.ebpf", "--ebpf.rescan-interval=0.2"]
    with exporter(args) as exp:
        w = Workload([prog, "2"])
        eventually(lambda: path in attached(exp), 60, f"probes on {path}")
        w.go()

        def counted() -> Run:
            r = Run(parse(exp.scrape()), exp.logs(), path)
            assert errors(r).get(("hipDeviceSynchronize", "hipErrorInvalidDevice")) == 1
            return r
        yield eventually(counted, 60, "the real library's errors")


def test_every_probe_the_real_library_exports_attaches(run: Run) -> None:
    exported = ElfFile.open(run.path).functions(p.symbol for p in abi.HIP_PROBES)
    # Every probe of ROCm 5.2 and older (the table's `since` is checked against this
    # library's exports in tests/ebpf_parts/test_hip_table.py).
    assert set(exported) == {p.symbol for p in abi.HIP_PROBES if not p.since}
    want = 2 * len(exported)  # an entry and a return probe each
    found = re.findall(rf"attached (\d+) probes to {re.escape(run.path)} ", run.logs)
    assert found and int(found[0]) == want, run.logs


def test_device_properties_layout_is_the_real_headers(tmp_path: Path) -> None:
    """The R0000 offsets recorded (and used by the probe) are those of the installed
    ROCm 5.2 headers."""
    src = tmp_path / "offsets.cpp"
    src.write_text("#include <hip/hip_runtime_api.h>\n#include <stddef.h>\n#include <stdio.h>\n"
                   "int main() { printf(\"%zu %zu %zu %zu\", sizeof(hipDeviceProp_t), "
                   "offsetof(hipDeviceProp_t, pciDomainID), offsetof(hipDeviceProp_t, pciBusID), "
                   "offsetof(hipDeviceProp_t, pciDeviceID)); }\n")
    exe = tmp_path / "offsets"
    subprocess.run([require_tool("g++"), "-D__HIP_PLATFORM_AMD__", "-o", str(exe), str(src)],
                   check=True, timeout=120)
    measured = [int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True,
                                               check=True).stdout.split()]
    assert measured == device_prop_offsets()["R0000"]


def test_kernel_node_params_layout_is_the_real_headers(tmp_path: Path) -> None:
    """hipGraphAddKernelNode's kernel handle is read where the installed ROCm 5.2 header
    puts hipKernelNodeParams' func (6.x's and 7.x's headers keep the layout:
    tests/fixtures/hip/README.md)."""
    src = tmp_path / "knode.cpp"
    src.write_text("#include <hip/hip_runtime_api.h>\n#include <stddef.h>\n#include <stdio.h>\n"
                   "int main() { printf(\"%zu\", offsetof(hipKernelNodeParams, func)); }\n")
    exe = tmp_path / "knode"
    subprocess.run([require_tool("g++"), "-D__HIP_PLATFORM_AMD__", "-o", str(exe), str(src)],
                   check=True, timeout=120)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    assert int(out) == abi.HIP_KNODE_FUNC_OFF


def test_calls_failing_without_a_gpu_are_errors_by_name(run: Run) -> None:
    # Each call the program makes fails with hipErrorInvalidDevice (101) and is counted
    # once, under the call it made (a call the library makes inside it is not counted).
    # <<<>>> launches (hipLaunchKernelGGL is one too) never reach hipLaunchKernel here:
    # __hipPushCallConfiguration failed first, and hipcc's stub then returns.
    e = "hipErrorInvalidDevice"
    assert errors(run) == {
        ("hipMalloc", e): 2, ("hipMallocManaged", e): 1, ("hipHostMalloc", e): 1,
        ("hipExtMallocWithFlags", e): 1, ("hipMemcpy", e): 3, ("hipMemcpyHtoD", e): 1,
        ("hipMemcpyDtoD", e): 1, ("hipMemcpy2D", e): 1, ("hipMemcpyAsync", e): 1,
        ("hipMemcpyToSymbol", e): 1, ("hipMemcpyFromSymbol", e): 1,
        ("hipMemcpyToSymbolAsync", e): 1,
        ("hipLaunchCooperativeKernel", e): 1,
        ("hipExtLaunchKernel", e): 1, ("hipModuleGetFunction", e): 2,
        ("hipModuleLaunchKernel", e): 2, ("hipExtModuleLaunchKernel", e): 1,
        ("hipHccModuleLaunchKernel", e): 1, ("hipStreamBeginCapture", e): 1,
        ("hipStreamEndCapture", e): 1, ("hipGraphInstantiate", e): 2, ("hipGraphLaunch", e): 3,
        ("hipGraphCreate", e): 1, ("hipGraphAddKernelNode", e): 1,
        ("hipEventRecord", e): 1, ("hipStreamSynchronize", e): 2, ("hipEventSynchronize", e): 1,
        ("hipDeviceSynchronize", e): 1,
        # completion points (hipErrorNotReady alone is an answer, not an error)
        ("hipEventQuery", e): 1, ("hipStreamQuery", e): 1, ("hipEventElapsedTime", e): 1,
        ("hipEventDestroy", e): 1,
    }


def test_failed_calls_are_not_work(run: Run) -> None:
    exe = {"process_executable_name": "hip_real"}
    for family in ("gpu_kernel_launch_calls_total", "gpu_memory_copies_bytes_count",
                   "gpu_memory_allocations_bytes_count"):
        assert not find(run.series, family, **exe), family
