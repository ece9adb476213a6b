"""A process's GPU becomes known while others of its executable name keep launching:
three copies of one program (tests/ebpf/csrc/stepper.c, one executable name), the real
exporter with the nvidia and ebpf collectors, real uprobes, and the fake NVML listing
one copy on a GPU from the start, a second from the middle of the run, the third never.
Every launch is counted in every scrape, no series goes down (the series without device
labels, which the unlisted copies share without --ebpf.pid-label, least of all), and the
listed copies' launches carry their GPU once NVML lists them."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tests.ebpf.conftest import Build, copy_program, only_ebpf_args, wait_attached, wait_until
from tests.fake_nvml import scenario as fake
from tests.helpers import Exporter, Series, exporter, find, parse

FIRST_GPU, LATER_GPU = 1, 3  # NVML's GPUs the listed copies are on
Key = tuple[tuple[str, str], ...]


class Stepper:
    """One copy running: launches on demand, counted here once it says done."""

    def __init__(self, path: str) -> None:
        self.proc = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline() == "ready\n"
        self.made = 0

    def launch(self, n: int) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline() == f"done {n}\n"
        self.made += n  # counted in the maps before the call returned

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0


@dataclass
class Watch:
    """The scrapes so far: each checked against the launches made and the one before."""

    exp: Exporter
    copies: list[Stepper]
    last: dict[Key, float] = field(default_factory=dict)

    def scrape(self) -> list[Series]:
        series = find(parse(self.exp.scrape()), "gpu_kernel_launch_calls_total",
                      process_executable_name="stepper")
        now = {tuple(sorted(s.labels.items())): s.value for s in series}
        assert sum(now.values()) == sum(c.made for c in self.copies), now
        for key, before in self.last.items():
            assert now.get(key, -1) >= before, (dict(key), before, now.get(key))
        self.last = now
        return series


def _gpu(series: list[Series], index: int | None, pid: str | None = None) -> float:
    """Launches in the series of GPU `index` (None: without device labels)."""
    return sum(s.value for s in series if s.labels.get("gpu_index") == (
        None if index is None else str(index)) and (pid is None or s.labels["process_pid"] == pid))


@pytest.fixture
def copies(cuda_build: Build) -> Iterator[list[Stepper]]:
    path = copy_program(cuda_build, "stepper", "stepper")
    running: list[Stepper] = []
    try:
        for _ in range(3):
            running.append(Stepper(path))
        yield running
    finally:
        for c in running:
            if c.proc.poll() is None:
                c.proc.kill()
                c.proc.wait()


@pytest.mark.parametrize("pid_label", [False, True], ids=["shared", "pid_label"])
def test_a_gpu_learned_mid_run_moves_only_later_launches(
        cuda_build: Build, copies: list[Stepper], pid_label: bool,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    first, later, never = copies
    sc = fake.h100x8()
    sc.devices[FIRST_GPU].processes.append(("compute", first.proc.pid, 1 << 30, None, None))
    path = sc.write(tmp_path_factory.mktemp("nvml") / "gpus.scenario")
    args = [*only_ebpf_args(), "--collector.ebpf", "--collector.nvidia",
            "--ebpf.rescan-interval=0.2", *(["--ebpf.pid-label"] if pid_label else [])]
    pid = {c: str(c.proc.pid) if pid_label else None for c in copies}
    with exporter(args, env=fake.env(fake.build(), path)) as exp:
        wait_attached(exp, cuda_build.dir)
        watch = Watch(exp, copies)
        for c, n in ((first, 5), (later, 7), (never, 3)):
            c.launch(n)
        series = watch.scrape()
        assert _gpu(series, FIRST_GPU, pid[first]) == 5  # listed from the start: its GPU
        assert _gpu(series, None) == 10  # the others: no device labels
        # NVML lists the second copy from now on, while the others keep launching.
        sc.devices[LATER_GPU].processes.append(("compute", later.proc.pid, 1 << 30, None,
                                                None))
        sc.write(path)

        def learned() -> bool:
            never.launch(1)
            first.launch(1)
            return any(s.labels.get("gpu_index") == str(LATER_GPU) for s in watch.scrape())

        wait_until(learned, "the second copy's GPU")
        before = later.made
        later.launch(4)
        never.launch(2)
        series = watch.scrape()
        # What it launched before stays where it was counted; the rest is on its GPU.
        assert _gpu(series, LATER_GPU, pid[later]) == later.made - before
        assert _gpu(series, None) == before + never.made
        if pid_label:
            assert _gpu(series, None, pid[later]) == before
            assert _gpu(series, None, pid[never]) == never.made
        assert _gpu(series, FIRST_GPU, pid[first]) == first.made
        gpu_series = [s for s in series if s.labels.get("gpu_index") == str(LATER_GPU)]
        assert {s.labels["hw_id"] for s in gpu_series} == {sc.devices[LATER_GPU].uuid}
        # Exited: folded into the exporter's own totals, still where they were.
        for c in copies:
            c.close()
        wait_until(lambda: not any(c.proc.poll() is None for c in copies), "the copies' exit")
        for _ in range(3):
            assert watch.scrape()
