"""Work and errors apart: a call that returns an error is not a launch, a copy, an
allocation or a synchronise, and is counted in gpu_cuda_errors_total under its
documented name and the error's name. The fake CUDA libraries fail the calls named in
FAKE_CUDA_FAIL (tests/ebpf/csrc/fake_fail.h); real uprobes, the real exporter."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from gpu_exporter.sources.ebpf import cuda_errors
from tests.ebpf.conftest import Build, Workload, copy_program, only_ebpf_args, wait_attached
from tests.helpers import REPO, Series, exporter, find, parse, promtool_check_metrics, value

RUNTIME_FAILS = ",".join([
    "cudaLaunchKernel=100x2",  # cudaErrorNoDevice, the first two launches
    "cudaMalloc=2x1",  # cudaErrorMemoryAllocation
    "cudaMemcpy=1x1",  # cudaErrorInvalidValue
    "cudaStreamSynchronize=700",  # cudaErrorIllegalAddress, every time
    "cudaGraphLaunch=12345x1",  # no such code: reported by its number
])
DRIVER_FAILS = "cuLaunchKernel=3x1,cuMemcpyHtoD_v2=201"  # NOT_INITIALIZED; INVALID_CONTEXT
# Codes newer than libcudart 11.8 and libcuda 535, named from CUDA 12.x and 13.x
NEWER_RUNTIME_FAILS = "cudaMalloc=227x1"  # cudaErrorInsufficientLoaderVersion, 13.0
NEWER_DRIVER_FAILS = "cuLaunchKernel=226x1"  # CUDA_ERROR_CONTAINED, 12.x
FIXTURE = REPO / "tests/fixtures/cuda/error-names.txt"


@dataclass(frozen=True)
class Run:
    text: str
    series: list[Series]
    runtime_pid: str  # of wl_fails


@pytest.fixture(scope="module")
def run(cuda_build: Build) -> Iterator[Run]:
    args = [*only_ebpf_args(), "--collector.ebpf", "--ebpf.rescan-interval=0.2",
            "--ebpf.pid-label"]
    with exporter(args) as exp:
        ws = [Workload([copy_program(cuda_build, "workload", "wl_fails"), "runtime", "1"],
                       env={"FAKE_CUDA_FAIL": RUNTIME_FAILS}),
              Workload([copy_program(cuda_build, "driver_only", "drv_fails"), "driver", "7"],
                       env={"FAKE_CUDA_FAIL": DRIVER_FAILS}),
              Workload([copy_program(cuda_build, "workload", "wl_fails13"), "runtime", "1"],
                       env={"FAKE_CUDA_FAIL": NEWER_RUNTIME_FAILS}),
              Workload([copy_program(cuda_build, "driver_only", "drv_fails13"), "driver", "7"],
                       env={"FAKE_CUDA_FAIL": NEWER_DRIVER_FAILS})]
        wait_attached(exp, cuda_build.dir)
        for w in ws:
            w.go()
        text = exp.scrape()
        yield Run(text, parse(text), str(ws[0].proc.pid))


def errors(r: Run, exe: str) -> dict[tuple[str, str], float]:
    return {(x.labels["cuda_call"], x.labels["error_type"]): x.value
            for x in find(r.series, "gpu_cuda_errors_total", process_executable_name=exe)}


def test_failed_calls_counted_by_call_and_error_name(run: Run) -> None:
    promtool_check_metrics(run.text)
    assert errors(run, "wl_fails") == {
        ("cudaLaunchKernel", "cudaErrorNoDevice"): 2,
        ("cudaMalloc", "cudaErrorMemoryAllocation"): 1,
        ("cudaMemcpy", "cudaErrorInvalidValue"): 1,
        ("cudaStreamSynchronize", "cudaErrorIllegalAddress"): 1,
        ("cudaGraphLaunch", "12345"): 1,
    }
    assert errors(run, "drv_fails") == {
        ("cuLaunchKernel", "CUDA_ERROR_NOT_INITIALIZED"): 1,
        ("cuMemcpyHtoD", "CUDA_ERROR_INVALID_CONTEXT"): 2,
    }


def test_error_codes_of_cuda_12_and_13_counted_by_name(run: Run) -> None:
    assert errors(run, "wl_fails13") == {
        ("cudaMalloc", "cudaErrorInsufficientLoaderVersion"): 1}
    assert errors(run, "drv_fails13") == {("cuLaunchKernel", "CUDA_ERROR_CONTAINED"): 1}


def test_failed_calls_are_not_counted_as_work(run: Run) -> None:
    launches = {(x.labels["cuda_api"], x.labels["cuda_kernel_name"]): x.value
                for x in find(run.series, "gpu_kernel_launch_calls_total",
                              process_executable_name="wl_fails")}
    # The first two cudaLaunchKernel calls (ml::gemm, the first vecAdd) failed; one of
    # the three graph launches failed.
    assert launches == {("runtime", "vecAdd"): 1, ("runtime", "(anonymous namespace)::helper"): 1,
                        ("runtime", "cooperative_kernel"): 1, ("runtime", "ns::Handled::run"): 2,
                        ("graph", "unknown"): 2}
    exe = {"process_executable_name": "wl_fails"}
    allocs = {x.labels["cuda_memory_type"]: (
        x.value, value(run.series, "gpu_memory_allocations_bytes_count", **x.labels))
        for x in find(run.series, "gpu_memory_allocations_bytes_sum", cuda_api="runtime", **exe)}
    assert allocs == {"device": ((1 << 20) + 100, 2), "managed": (12345, 1)}
    assert value(run.series, "gpu_memory_copies_bytes_count", cuda_memcpy_kind="HostToDevice",
                 **exe) == 3
    assert value(run.series, "gpu_memory_copies_bytes_sum", cuda_memcpy_kind="HostToDevice",
                 **exe) == 2 * 1000 + 5000
    # Launch shapes only of the launches that happened: 1000 + 4 + 16 + 1 + 1 blocks.
    assert value(run.series, "gpu_kernel_grid_size_sum", **exe) == 1000 + 4 + 16 + 2
    drv = {"process_executable_name": "drv_fails"}
    assert {x.labels["cuda_kernel_name"]: x.value for x in find(
        run.series, "gpu_kernel_launch_calls_total", **drv)} == {
            "triton::matmul_v2": 6, "fused_kernel": 2}
    assert not find(run.series, "gpu_memory_copies_bytes_count", cuda_memcpy_kind="HostToDevice",
                    **drv)
    assert value(run.series, "gpu_memory_copies_bytes_count", cuda_memcpy_kind="DeviceToHost",
                 **drv) == 1


def test_failed_synchronise_is_no_sync_and_no_duration_sample(run: Run) -> None:
    pid = {"process_pid": run.runtime_pid}
    syncs = {x.labels["cuda_sync_call"]: x.value
             for x in find(run.series, "gpu_sync_duration_seconds_count", **pid)}
    assert syncs == {"cudaDeviceSynchronize": 1}  # every cudaStreamSynchronize failed
    # Every launch that succeeded has its sample, from the device synchronise (the
    # stream's failed); the failed launches (ml::gemm, a vecAdd, a graph) have none.
    durations = {x.labels["cuda_kernel_name"]: x.value
                 for x in find(run.series, "gpu_kernel_duration_seconds_count", **pid,
                               completion="sync_fallback")}
    launched: dict[str, float] = {}
    for x in find(run.series, "gpu_kernel_launch_calls_total", **pid):
        name = "unknown" if x.labels["cuda_api"] == "graph" else x.labels["cuda_kernel_name"]
        launched[name] = launched.get(name, 0) + x.value
    assert durations == launched
    assert "ml::gemm" not in durations and durations["vecAdd"] == 1
    assert durations["unknown"] == 2  # graph launches: the one failed has no sample


def recorded_names() -> dict[str, dict[str, dict[int, str]]]:
    """tests/fixtures/cuda/error-names.txt: per side, per source (oldest first), the
    names NVIDIA's libraries and headers give, as scripts/gen-cuda-errors.py read them."""
    found: dict[str, dict[str, dict[int, str]]] = {"runtime": {}, "driver": {}}
    for line in FIXTURE.read_text().splitlines():
        if line and not line.startswith("#"):
            side, source, code, name = line.split("\t")
            found[side].setdefault(source, {})[int(code)] = name
    return found


def test_error_names_are_the_real_libraries_newest_first() -> None:
    recorded = recorded_names()
    assert [s.split()[0] for s in recorded["runtime"]] == ["libcudart"] * 3
    assert [s.split()[0] for s in recorded["driver"]] == ["libcuda", "cuda.h", "cuda.h"]
    assert list(recorded["runtime"])[-1].split()[1].startswith("13.")
    assert list(recorded["driver"])[-1].split()[1].startswith("13.")
    for side, table in (("runtime", cuda_errors.RUNTIME), ("driver", cuda_errors.DRIVER)):
        newest: dict[int, str] = {}
        for names in recorded[side].values():
            newest.update(names)
        assert table == newest, side
    # The CUDA 12/13 driver names come from cuda.h's CUresult enum: cuGetErrorName
    # returns its identifiers, as every name the real libcuda gives shows.
    (_, libcuda), *headers = recorded["driver"].items()
    for source, enum in headers:
        assert {code: enum.get(code) for code in libcuda} == libcuda, source


def test_error_names_are_the_cuda_libraries_own() -> None:
    # Spot checks against the CUDA headers' enums.
    assert cuda_errors.RUNTIME[35] == "cudaErrorInsufficientDriver"
    assert cuda_errors.RUNTIME[100] == "cudaErrorNoDevice"
    assert cuda_errors.RUNTIME[999] == "cudaErrorUnknown"
    assert cuda_errors.RUNTIME[917] == "cudaErrorStreamDetached"  # 13.0
    assert cuda_errors.DRIVER[3] == "CUDA_ERROR_NOT_INITIALIZED"
    assert cuda_errors.DRIVER[100] == "CUDA_ERROR_NO_DEVICE"
    assert cuda_errors.DRIVER[919] == "CUDA_ERROR_FABRIC_NOT_READY"  # 13.0
    assert 0 not in cuda_errors.RUNTIME and 0 not in cuda_errors.DRIVER  # success
    assert all(n.startswith("cudaError") for n in cuda_errors.RUNTIME.values())
    assert all(n.startswith("CUDA_ERROR_") for n in cuda_errors.DRIVER.values())
