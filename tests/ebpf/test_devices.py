"""Which GPU each CUDA call ran on, judged by NVML: the real exporter with the nvidia
and ebpf collectors, the fake NVML listing the workloads' pids on its GPUs, and the fake
CUDA driver enumerating the same GPUs in its own order, with CUDA_VISIBLE_DEVICES
changed at run time. Counts and devices are those of tests/ebpf/csrc/devices.c."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.ebpf.conftest import Build, Workload, only_ebpf_args, wait_attached, wait_until
from tests.fake_nvml import scenario as fake
from tests.helpers import Series, exporter, find, parse, promtool_check_metrics

# The order the fake CUDA driver enumerates the GPUs in (fastest first, say): NVML
# indices. CUDA_VISIBLE_DEVICES indexes this order.
CUDA_ORDER = (6, 4, 7, 2)
EXEC_VISIBLE = "1,0"  # in /proc/<pid>/environ: ordinal 0 would be GPU 4 by it (wrong)
RUN_VISIBLE = "3,1"  # set by the program before its first CUDA call: ordinals 0, 1 are
ORDINAL_GPU = (2, 4)  # NVML's GPUs 2 and 4
ONE_GPU = 5


@dataclass(frozen=True)
class Run:
    series: list[Series]
    pids: dict[str, str]  # mode -> pid

    def of(self, name: str, mode: str, **labels: str) -> list[Series]:
        return find(self.series, name, process_pid=self.pids[mode], **labels)

    def device_of(self, name: str, mode: str, **labels: str) -> tuple[str | None, str | None]:
        """(hw_id, gpu_index) of the one series of `name` with these labels."""
        got = self.of(name, mode, **labels)
        assert len(got) == 1, (name, mode, labels, got)
        return got[0].labels.get("hw_id"), got[0].labels.get("gpu_index")


def gpu(i: int) -> tuple[str, str]:
    return fake.h100(i).uuid, str(i)


class Held(Workload):
    """A workload that stays alive after its work (NVML still lists it) until closed."""

    def work(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "done"

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0


@pytest.fixture(scope="module")
def run(cuda_build: Build, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    sc = fake.h100x8()
    devices = ";".join(f"{sc.devices[i].uuid}@{sc.devices[i].pci_bus_id}" for i in CUDA_ORDER)
    program = cuda_build.path("devices")
    env = {"FAKE_CUDA_DEVICES": devices, "CUDA_VISIBLE_DEVICES": EXEC_VISIBLE,
           "RUN_VISIBLE_DEVICES": RUN_VISIBLE}
    one = Held([program, "one"], {**env, "FAKE_CUDA_FAIL": "cudaMalloc=2x1"})
    multi = Held([program, "multi"], env)
    unasked = Held([program, "unasked"], env)
    held = {"one": one, "multi": multi, "unasked": unasked}
    try:
        sc.devices[ONE_GPU].processes.append(("compute", one.proc.pid, 1 << 30, None, None))
        for i in ORDINAL_GPU:
            for w in (multi, unasked):
                sc.devices[i].processes.append(("compute", w.proc.pid, 1 << 30, None, None))
        path = sc.write(tmp_path_factory.mktemp("nvml") / "gpus.scenario")
        args = [*only_ebpf_args(), "--collector.ebpf", "--collector.nvidia",
                "--ebpf.rescan-interval=0.2", "--ebpf.pid-label"]
        with exporter(args, env=fake.env(fake.build(), path)) as exp:
            wait_attached(exp, cuda_build.dir)
            for w in held.values():
                w.work()
            pid = str(multi.proc.pid)

            def labelled() -> bool:
                s = parse(exp.scrape())
                return any("hw_id" in x.labels for x in find(
                    s, "gpu_kernel_launch_calls_total", process_pid=pid,
                    cuda_kernel_name="drv_b"))

            wait_until(labelled, "device labels on the multi-GPU process's launches")
            text = exp.scrape()
        promtool_check_metrics(text)
        yield Run(parse(text), {m: str(w.proc.pid) for m, w in held.items()})
    finally:
        for w in held.values():
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()


def test_a_process_nvml_lists_on_one_gpu_is_on_that_gpu(run: Run) -> None:
    assert run.device_of("gpu_kernel_launch_calls_total", "one",
                         cuda_kernel_name="kern_one") == gpu(ONE_GPU)
    assert run.of("gpu_kernel_launch_calls_total", "one")[0].value == 3
    alloc = run.of("gpu_memory_allocations_bytes_count", "one")
    assert [(x.value, x.labels.get("hw_id")) for x in alloc] == [(1, gpu(ONE_GPU)[0])]
    assert run.device_of("gpu_cuda_errors_total", "one", cuda_call="cudaMalloc",
                         error_type="cudaErrorMemoryAllocation") == gpu(ONE_GPU)
    # Launch shapes are kept per process: on its one GPU too.
    assert run.device_of("gpu_kernel_grid_size_count", "one") == gpu(ONE_GPU)


def test_a_multi_gpu_process_is_attributed_by_what_it_was_told_its_ordinals_are(
        run: Run) -> None:
    """Ordinal 0 (asked by UUID) and 1 (asked by PCI address) after CUDA_VISIBLE_DEVICES
    was changed at run time: neither the exec-time environment nor NVML's numbering."""
    on0, on1 = gpu(ORDINAL_GPU[0]), gpu(ORDINAL_GPU[1])
    launches = "gpu_kernel_launch_calls_total"
    got = {(x.labels["cuda_kernel_name"], x.labels["cuda_api"], x.labels.get("hw_id"),
            x.labels.get("gpu_index")): x.value for x in run.of(launches, "multi")}
    assert got == {
        ("kern_a", "runtime", *on0): 2,  # no cudaSetDevice: the runtime's ordinal 0
        ("kern_b", "runtime", *on1): 4,  # cudaSetDevice(1); a failed cudaSetDevice(5)
        ("drv_b", "driver", *on1): 5,  # primary context of 1 made current, pushed over, popped
        ("drv_a", "driver", *on0): 5,  # primary context of 0 pushed
        ("drv_v2", "driver", *on1): 2,  # cuCtxCreate_v2 on 1
        ("drv_v4", "driver", *on0): 3,  # cuCtxCreate_v4 (CUDA 13's cuCtxCreate) on 0
        ("drv_c", "driver", None, None): 2,  # no context, or one no probe saw made
    }
    assert run.device_of("gpu_memory_allocations_bytes_count", "multi") == on1
    assert run.device_of("gpu_memory_copies_bytes_count", "multi",
                         cuda_memcpy_kind="HostToDevice") == on0
    assert run.device_of("gpu_cuda_errors_total", "multi", cuda_call="cudaSetDevice",
                         error_type="cudaErrorInvalidDevice") == on1
    # Shapes are per process, and this one is on two GPUs: no device.
    assert run.device_of("gpu_kernel_grid_size_count", "multi") == (None, None)


def test_ordinals_a_process_never_asked_about_stay_unlabelled(run: Run) -> None:
    got = run.of("gpu_kernel_launch_calls_total", "unasked")
    assert [(x.labels["cuda_kernel_name"], x.value) for x in got] == [("kern_c", 2)]
    assert "hw_id" not in got[0].labels and "gpu_index" not in got[0].labels


def test_device_labels_feature_enabled(run: Run) -> None:
    assert [x.labels["state"] for x in find(run.series, "gpu_exporter_feature_status",
                                            feature="ebpf.device_labels") if x.value == 1
            ] == ["enabled"]


def test_device_labels_are_those_of_the_gpu_series(run: Run) -> None:
    """The same label set as hw_gpu_* of that GPU: one join, not a copy."""
    info = find(run.series, "hw_gpu_info", hw_id=gpu(ONE_GPU)[0])
    assert len(info) == 1
    launch = run.of("gpu_kernel_launch_calls_total", "one")[0]
    for k in ("hw_id", "gpu_index", "hw_name", "gpu_pci_address", "hw_vendor"):
        assert launch.labels[k] == info[0].labels[k], k

