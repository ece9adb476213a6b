"""Strided, 3D and peer copies and pinned host allocations, through the runtime (which
calls the driver, as the real one does: counted once) and through the driver alone: the
real exporter, real uprobes on the fake CUDA libraries, exact bytes per kind."""

from __future__ import annotations

import math

import pytest

from tests.ebpf.conftest import Build, Workload, copy_program, only_ebpf_args, wait_attached
from tests.helpers import Series, exporter, find, parse, value


@pytest.fixture(scope="module")
def series(cuda_build: Build) -> list[Series]:
    rt = copy_program(cuda_build, "copies", "cp_runtime")
    drv = copy_program(cuda_build, "copies", "cp_driver")
    args = [*only_ebpf_args(), "--collector.ebpf", "--ebpf.rescan-interval=0.2"]
    with exporter(args) as exp:
        # One failed call each: an error, not a copy.
        work = [Workload([rt, "runtime"], {"FAKE_CUDA_FAIL": "cudaMemcpy2D=1x1"}),
                Workload([drv, "driver"], {"FAKE_CUDA_FAIL": "cuMemcpyPeer=1x1"})]
        wait_attached(exp, cuda_build.dir)
        for w in work:
            w.go()
        return parse(exp.scrape())


def _copies(series: list[Series], exe: str) -> dict[str, tuple[float, float]]:
    return {x.labels["cuda_memcpy_kind"]: (
        x.value, value(series, "gpu_memory_copies_bytes_count", **x.labels))
        for x in find(series, "gpu_memory_copies_bytes_sum", process_executable_name=exe)}


def _allocations(series: list[Series], exe: str) -> dict[tuple[str, str], tuple[float, float]]:
    return {(x.labels["cuda_api"], x.labels["cuda_memory_type"]): (
        x.value, value(series, "gpu_memory_allocations_bytes_count", **x.labels))
        for x in find(series, "gpu_memory_allocations_bytes_sum", process_executable_name=exe)}


def _errors(series: list[Series], exe: str) -> dict[tuple[str, str], float]:
    return {(x.labels["cuda_call"], x.labels["error_type"]): x.value
            for x in find(series, "gpu_cuda_errors_total", process_executable_name=exe)}


def test_runtime_2d_3d_peer_copies_width_times_height_times_depth(series: list[Series]) -> None:
    # cudaMemcpy2D 40x3 (the first of two failed), 2DToArray 10x7, 2DToArrayAsync 3x3,
    # 3DAsync 4x4x4; 2DAsync 16x5, 2DFromArray 6x6, 2DFromArrayAsync 2x50; 2DArrayToArray
    # 8x8, 3D 10x20x3, 3DPeer 7x1x1, 3DPeerAsync 2x2x2, Peer 1000, PeerAsync 3000. The
    # driver calls each makes are not counted again.
    assert _copies(series, "cp_runtime") == {
        "HostToDevice": (120 + 70 + 9 + 64, 4),
        "DeviceToHost": (80 + 36 + 100, 3),
        "DeviceToDevice": (64 + 600 + 7 + 8 + 1000 + 3000, 6),
    }
    d2d = {float(x.labels["le"]): x.value for x in find(
        series, "gpu_memory_copies_bytes_bucket", process_executable_name="cp_runtime",
        cuda_memcpy_kind="DeviceToDevice")}
    assert (d2d[16], d2d[64], d2d[1024], d2d[4096], d2d[math.inf]) == (2, 3, 5, 6, 6)


def test_driver_2d_3d_peer_copies_kind_from_memory_types(series: list[Series]) -> None:
    # 2D host->device 100x2; 2DUnaligned device->host 30x3; 2DAsync array->device 10x10,
    # 3D 4x5x6, 3DPeer 3x3x3, Peer 500 (the first of two failed), PeerAsync 50; 3DAsync
    # unified->device 8x8x2; 3DPeerAsync host->host 2x1x1
    assert _copies(series, "cp_driver") == {
        "HostToDevice": (200, 1),
        "DeviceToHost": (90, 1),
        "DeviceToDevice": (100 + 120 + 27 + 500 + 50, 5),
        "Default": (128, 1),
        "HostToHost": (2, 1),
    }


def test_pinned_host_allocations_labelled_apart_and_counted_once(series: list[Series]) -> None:
    assert _allocations(series, "cp_runtime") == {
        ("runtime", "host"): (4096 + 8192, 2),  # cudaMallocHost, cudaHostAlloc
        ("runtime", "device"): (100, 1),  # cudaMallocAsync, not again as cuMemAllocAsync
    }
    assert _allocations(series, "cp_driver") == {
        ("driver", "host"): (1024 + 2048, 2),  # cuMemHostAlloc, cuMemAllocHost
        ("driver", "device"): (256, 1),  # cuMemAllocAsync
        ("driver", "managed"): (512, 1),  # cuMemAllocManaged
    }


def test_failed_copies_are_errors(series: list[Series]) -> None:
    assert _errors(series, "cp_runtime") == {("cudaMemcpy2D", "cudaErrorInvalidValue"): 1}
    assert _errors(series, "cp_driver") == {("cuMemcpyPeer", "CUDA_ERROR_INVALID_VALUE"): 1}


def test_3d_copy_with_an_array_is_not_observed_but_counted_as_unknown_size(
        series: list[Series]) -> None:
    # Its extent is in array elements: no byte count is made up for it.
    assert value(series, "gpu_exporter_ebpf_events_dropped_total",
                 reason="copy_size_unknown") == 1
    assert value(series, "gpu_exporter_ebpf_events_dropped_total", reason="bad_argument") == 0
