"""HIP bad input: each case counts what it could not count and the exporter goes on. A
stripped runtime (only its dynamic symbols), a 64 KiB kernel name, kernels of a library
dlopened after the start whose names only their registration tells, a process that
exits inside hipLaunchKernel. The real exporter, real uprobes, programs built by the
real hipcc over the fake libamdhip64.so.5 (tests/ebpf/csrc/)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.ebpf.conftest import HIP_LIB, Build, Workload, attached, copy_program, only_ebpf_args
from tests.ebpf.test_hip import expected_launches
from tests.helpers import Series, eventually, exporter, find, parse, value

N = 3
LATE = 4  # launches of the dlopened library's kernel


@dataclass(frozen=True)
class Run:
    series: list[Series]

    def launches(self, exe: str) -> dict[tuple[str, str], float]:
        return {(x.labels["cuda_api"], x.labels["cuda_kernel_name"]): x.value
                for x in find(self.series, "gpu_kernel_launch_calls_total",
                              process_executable_name=exe)}

    def dropped(self, reason: str) -> float:
        return value(self.series, "gpu_exporter_ebpf_events_dropped_total", reason=reason)


@pytest.fixture(scope="module")
def run(hip_build: Build) -> Iterator[Run]:
    args = [*only_ebpf_args(), "--collector.ebpf", "--ebpf.rescan-interval=0.2"]
    stripped = Build(hip_build.dir / "stripped")
    with exporter(args) as exp:
        ws = [Workload([stripped.path("hip_stripped"), str(N)]),
              Workload([hip_build.path("hip_long_name")]),
              Workload([hip_build.path("hip_dlopen"), str(LATE)])]
        exits = subprocess.Popen(
            [copy_program(hip_build, "hip_workload", "hip_exits"), "1", "--wait"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={"FAKE_HIP_EXIT_IN": "hipLaunchKernel"})
        assert exits.stdout is not None and exits.stdout.readline() == "ready\n"
        libs = {stripped.path(HIP_LIB), hip_build.path(HIP_LIB)}
        eventually(lambda: libs <= attached(exp), 60, f"probes on {libs}")
        for w in ws:
            w.go()
        exits.communicate("go\n", timeout=60)
        assert exits.returncode == 7  # _exit() inside hipLaunchKernel: it never returned

        def counted() -> Run:
            r = Run(parse(exp.scrape()))
            assert r.launches("hip_stripped") == expected_launches(N)
            assert r.launches("hip_dlopen").get(("hip", "ext::late_kernel")) == LATE
            assert r.launches("hip_long_name").get(("hip", "short_one")) == 2
            assert r.dropped("call_unfinished") >= 1
            # the exited process's records may be read a scrape after the others'
            assert find(r.series, "gpu_memory_copies_bytes_count",
                        cuda_memcpy_kind="HostToDevice", process_executable_name="hip_exits")
            return r
        yield eventually(counted, 60, "the bad input's counts")
        assert exp.proc.poll() is None  # still running
        assert exp.get("/healthz")[0] == 200


def test_a_stripped_runtime_is_probed_by_its_dynamic_symbols(run: Run) -> None:
    assert run.launches("hip_stripped") == expected_launches(N)


def test_a_64_kib_kernel_name_is_other_and_counted_as_a_drop(run: Run) -> None:
    assert run.launches("hip_long_name") == {("hip", "other"): 3, ("hip", "short_one"): 2}
    assert run.dropped("kernel_name_too_long") >= 1
    assert value(run.series, "gpu_exporter_ebpf_kernel_names_overflow_total") >= 3


def test_kernels_registered_after_the_start_are_named_by_their_registration(run: Run) -> None:
    # The dlopened library has no symbol of its kernel left (stripped, a version script):
    # the name is the one __hipRegisterFunction was given when it loaded.
    assert run.launches("hip_dlopen") == {("hip", "before_load"): 1,
                                          ("hip", "ext::late_kernel"): LATE}


def test_a_process_exiting_mid_launch_counts_a_drop_and_no_launch(run: Run) -> None:
    assert run.dropped("call_unfinished") >= 1
    assert not run.launches("hip_exits")
    assert not find(run.series, "gpu_cuda_errors_total", process_executable_name="hip_exits")
    # what it did before is counted: its two 1000-byte HostToDevice copies and the rest
    # (hipMemcpyHtoD, hipMemcpyAsync, hipMemcpyToSymbol)
    assert value(run.series, "gpu_memory_copies_bytes_count", cuda_memcpy_kind="HostToDevice",
                 process_executable_name="hip_exits") == 5
