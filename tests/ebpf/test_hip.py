"""HIP (AMD) at parity with CUDA: programs built by the real hipcc (--offload-arch=gfx90a,
registration and <<<>>> exactly as hipcc emits them) run against a fake libamdhip64.so.5
of the same soname and version nodes (tests/ebpf/csrc/fake_hip.cpp); the real exporter
attaches real uprobes; one scrape is checked to the exact count by kernel name, per API
(`cuda_api` hip / hip_module / hip_graph), copies by direction and size, allocations,
synchronising calls, and failed calls as errors by their hipError_t name, never as work.
Needs root, bcc, kernel headers and hipcc: as CI has them, their absence fails."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.ebpf.conftest import (
    HIP_LIB,
    Build,
    Workload,
    attached,
    copy_program,
    engine,
    only_ebpf_args,
)
from tests.helpers import Series, eventually, exporter, find, parse, promtool_check_metrics, value

N = 5  # vecAdd<<<>>> launches of the workload
FAILS = ",".join([
    "hipLaunchKernel=100x1",  # hipErrorNoDevice: the first vecAdd<<<>>>
    "hipMalloc=2x1",  # hipErrorOutOfMemory: the 1 MiB one
    "hipMemcpy=1x1",  # hipErrorInvalidValue: the first 1000-byte HostToDevice copy
    "hipStreamSynchronize=719",  # hipErrorLaunchFailure, every time
    "hipModuleLaunchKernel=98x1",  # hipErrorInvalidDeviceFunction
    "hipGraphLaunch=12345x1",  # no such code: reported by its number
])


@dataclass(frozen=True)
class Run:
    text: str
    series: list[Series]
    pids: frozenset[str]  # of the two workloads (the sync family has no executable label)

    def of(self, name: str, exe: str, **labels: str) -> list[Series]:
        return find(self.series, name, process_executable_name=exe, **labels)


def launches(r: Run, exe: str) -> dict[tuple[str, str], float]:
    return {(x.labels["cuda_api"], x.labels["cuda_kernel_name"]): x.value
            for x in r.of("gpu_kernel_launch_calls_total", exe)}


def expected_launches(n: int) -> dict[tuple[str, str], float]:
    return {
        ("hip", "vecAdd"): n,  # <<<>>>: Push, Pop, then hipLaunchKernel (counted there)
        ("hip", "ml::gemm"): 2,  # hipLaunchKernelGGL of a template
        ("hip", "(anonymous namespace)::helper"): 1,
        ("hip", "cooperative_kernel"): 2,  # hipLaunchCooperativeKernel, hipExtLaunchKernel
        ("hip", "newer_launch"): 1,  # hipLaunchKernelExC (ROCm 6.5)
        # hipModuleLaunchKernel x2 and hipDrvLaunchKernelEx (6.5), by the name looked up
        ("hip_module", "triton_poi_fused_add_0"): 3,
        # hipExtModuleLaunchKernel, hipHccModuleLaunchKernel (C++ names only)
        ("hip_module", "triton::matmul"): 2,
        ("hip_graph", "graph_step"): 4,  # two launches of a captured graph of two nodes
        # one launch of a graph built node by node: hipGraphAddKernelNode's node and
        # hipGraphAddNode's (ROCm 6.2), named from hipKernelNodeParams' func
        ("hip_graph", "explicit_node"): 1,
        ("hip_graph", "added_node"): 1,
    }


@pytest.fixture(scope="module")
def run(hip_build: Build) -> Iterator[Run]:
    args = [*only_ebpf_args(), "--collector.ebpf", "--ebpf.rescan-interval=0.2",
            "--ebpf.pid-label"]
    ok = copy_program(hip_build, "hip_workload", "hip_fake")
    bad = copy_program(hip_build, "hip_workload", "hip_fails")
    with exporter(args) as exp:
        ws = [Workload([ok, str(N)]), Workload([bad, str(N)], env={"FAKE_HIP_FAIL": FAILS})]
        lib = hip_build.path(HIP_LIB)
        eventually(lambda: lib in attached(exp), 60, f"probes on {lib}")

        def hip_feature() -> bool:  # a HIP runtime has probes: the feature says which
            s = parse(exp.scrape())
            return value(s, "gpu_exporter_feature_status", feature="ebpf.hip",
                         state="enabled") == 1
        eventually(hip_feature, 60, "feature ebpf.hip enabled")
        for w in ws:
            w.go()

        def counted() -> Run:
            text = exp.scrape()
            r = Run(text, parse(text), frozenset(str(w.proc.pid) for w in ws))
            assert launches(r, "hip_fake") == expected_launches(N)
            assert sum(launches(r, "hip_fails").values()) == sum(expected_launches(N).values()) - 4
            return r
        yield eventually(counted, 60, "the HIP workloads' launches, by name")


def test_launches_counted_by_kernel_name_and_hip_api(run: Run) -> None:
    promtool_check_metrics(run.text)
    assert launches(run, "hip_fake") == expected_launches(N)


def test_launch_shapes(run: Run) -> None:
    exe = {"process_executable_name": "hip_fake"}
    # Blocks per grid: vecAdd 4x2x1, gemm 3 (x2), helper 1, cooperative 2 and 5, ExC 6,
    # module 7 (x2) and 9, extended module launches: 256 / 64 and 130 / 64 threads, rounded
    # up. Captured graph nodes are not launches.
    assert value(run.series, "gpu_kernel_grid_size_sum", **exe) == (
        8 * N + 6 + 1 + 7 + 6 + 14 + 9 + 4 + 3)
    assert value(run.series, "gpu_kernel_grid_size_count", **exe) == N + 2 + 1 + 2 + 1 + 3 + 2
    assert value(run.series, "gpu_kernel_block_size_sum", **exe) == (
        64 * N + 64 + 1 + 24 + 10 + 256 + 4 + 64 + 64)


def test_copies_by_direction_and_size(run: Run) -> None:
    copies = {x.labels["cuda_memcpy_kind"]: (
        x.value, value(run.series, "gpu_memory_copies_bytes_count", **x.labels))
        for x in run.of("gpu_memory_copies_bytes_sum", "hip_fake")}
    # (hipMemcpyToSymbol 16 HostToDevice, hipMemcpyFromSymbol 8 DeviceToHost,
    # hipMemcpyToSymbolAsync 32 DeviceToDevice: the kind their 5th argument)
    assert copies == {"HostToDevice": (2 * 1000 + 300 + 200 + 16, 5),
                      "DeviceToHost": (500 + 8, 2), "DeviceToDevice": (64 + 16 * 4 + 32, 3)}


def test_allocations_by_memory_type(run: Run) -> None:
    allocs = {(x.labels["cuda_api"], x.labels["cuda_memory_type"]): (
        x.value, value(run.series, "gpu_memory_allocations_bytes_count", **x.labels))
        for x in run.of("gpu_memory_allocations_bytes_sum", "hip_fake")}
    assert allocs == {("hip", "device"): ((1 << 20) + 4096 + 777, 3),
                      ("hip", "managed"): (12345, 1), ("hip", "host"): (4096, 1)}


def test_synchronising_calls(run: Run) -> None:
    syncs: dict[str, float] = {}
    for x in find(run.series, "gpu_sync_duration_seconds_count"):
        if x.labels.get("process_pid") in run.pids:
            syncs[x.labels["cuda_sync_call"]] = syncs.get(x.labels["cuda_sync_call"], 0) + x.value
    # hip_fake: 2 stream, 1 event, 1 device; hip_fails: every stream sync failed
    assert syncs == {"hipStreamSynchronize": 2, "hipEventSynchronize": 2,
                     "hipDeviceSynchronize": 2}


def test_failed_calls_are_errors_by_name_never_work(run: Run) -> None:
    errors = {(x.labels["cuda_call"], x.labels["error_type"]): x.value
              for x in run.of("gpu_cuda_errors_total", "hip_fails")}
    assert errors == {
        ("hipLaunchKernel", "hipErrorNoDevice"): 1,
        ("hipMalloc", "hipErrorOutOfMemory"): 1,
        ("hipMemcpy", "hipErrorInvalidValue"): 1,
        ("hipStreamSynchronize", "hipErrorLaunchFailure"): 2,
        ("hipModuleLaunchKernel", "hipErrorInvalidDeviceFunction"): 1,
        ("hipGraphLaunch", "12345"): 1,
    }
    assert not run.of("gpu_cuda_errors_total", "hip_fake")
    want = expected_launches(N)
    want[("hip", "vecAdd")] -= 1
    want[("hip_module", "triton_poi_fused_add_0")] -= 1
    want[("hip_graph", "graph_step")] -= 2
    assert launches(run, "hip_fails") == want
    exe = {"process_executable_name": "hip_fails"}
    assert value(run.series, "gpu_memory_allocations_bytes_count", cuda_memory_type="device",
                 **exe) == 2
    assert value(run.series, "gpu_memory_copies_bytes_sum", cuda_memcpy_kind="HostToDevice",
                 **exe) == 1000 + 300 + 200 + 16


def test_a_process_is_told_its_ordinals_pci_addresses_each_way_hip_tells_it(
        hip_build: Build) -> None:
    """What a multi-GPU process learns of its ordinals (device labels: docs/ebpf.md):
    hipGetDevicePropertiesR0600's PCI fields (ROCm 6.x), hipGetDeviceProperties' (5.x
    layout), hipDeviceGetPCIBusId's string; the probes on the fake runtime, in this
    process's engine."""
    with engine() as e:
        w = Workload([hip_build.path("hip_devices")])
        e.rescan()
        w.go()

        def told() -> list[str | None]:
            return [e.resolver.device_id(w.proc.pid, i) for i in range(3)]
        eventually(lambda: told() == ["0000:c1:00.0", "0000:c2:00.0", "0000:c3:00.0"], 30,
                   "the ordinals' PCI addresses")
