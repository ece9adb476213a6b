"""process_executable_name has a ceiling (issue #32): at most --ebpf.executable-names-max
names with series of their own, the processes of later names in `other` for their life
(counted), and the series of exited processes dropped --ebpf.exited-series-expiry after
their last count, never lowered. Driven through the maps' reader with map contents the
test writes (tests/ebpf_parts/parts.py): no bcc, no root."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.sources.ebpf.names import OTHER, ExecutableCap
from gpu_exporter.sources.ebpf.reading import CudaActivity
from tests.ebpf_parts.parts import Parts, parts

GEMM = 0x1000
EXPIRY = 600.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _launches(a: CudaActivity) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for x in a.launches:
        out[x.executable] += x.count
    return dict(out)


def _run(p: Parts, tgid: int, exe: str, n: int = 5) -> None:
    """A process of `exe` that launched a kernel `n` times and made a grid histogram."""
    p.process(tgid, exe)
    p.name(tgid, GEMM, "_Z6k_gemmv")
    p.count(tgid, abi.FAM_LAUNCH, abi.API_DRIVER, GEMM, n)
    p.shape(tgid, slot=tgid % 60, grid_slot=tgid % 7, n=n, launches=[])


def _reader(tmp_path: Path, limit: int) -> tuple[Parts, Clock]:
    clock = Clock()
    return parts(tmp_path, pid_label=False, executables=ExecutableCap(limit),
                 expiry_seconds=EXPIRY, clock=clock), clock


def test_names_past_the_cap_are_other_for_their_life_and_counted(tmp_path: Path) -> None:
    p, clock = _reader(tmp_path, 2)
    for i, exe in enumerate(("train", "serve", "probe-1", "probe-2")):
        _run(p, 100 + i, exe)
    a = p.reader.read()
    assert _launches(a) == {"train": 5, "serve": 5, OTHER: 10}
    assert a.executables_folded == 2
    assert {h.key.executable for h in a.grid_size} == {"train", "serve", OTHER}
    # train exits: its series stays (it holds its place), probe-3 is folded too
    p.exit(100)
    _run(p, 104, "probe-3")
    clock.now += 60
    a = p.reader.read()
    assert _launches(a) == {"train": 5, "serve": 5, OTHER: 15}
    assert a.executables_folded == 3
    # past the expiry, train's series is dropped whole (grid buckets included) and its
    # place is free: a new name takes it; probe-1, still running, stays in other
    clock.now += EXPIRY
    a = p.reader.read()
    assert _launches(a) == {"serve": 5, OTHER: 15}
    assert "train" not in {h.key.executable for h in a.grid_size}
    _run(p, 105, "fresh")
    _run(p, 106, "probe-1")  # a name folded while a process of it is: folded
    a = p.reader.read()
    assert _launches(a) == {"serve": 5, "fresh": 5, OTHER: 20}
    assert a.executables_folded == 4


def test_no_counter_goes_down_while_processes_come_and_go(tmp_path: Path) -> None:
    """1,500 short-lived processes, each of its own name, 30 at a time, the clock moving
    on; after every read, every series still present is at least what it was, and the
    series stay within the cap's bound."""
    p, clock = _reader(tmp_path, 10)
    seen: dict[tuple[str, str], int] = {}
    most = 0
    for wave in range(50):
        tgids = range(10_000 + wave * 30, 10_000 + wave * 30 + 30)
        for tgid in tgids:
            _run(p, tgid, f"job-{tgid}")
        a = p.reader.read()
        for tgid in tgids:
            p.exit(tgid)
        clock.now += 30
        series = {(x.executable, x.kernel_name): x.count for x in a.launches}
        for key, n in series.items():
            assert n >= seen.get(key, 0), (wave, key)
        seen.update(series)
        most = max(most, len(series) + len(a.grid_size))
    a = p.reader.read()
    assert sum(_launches(a).values()) <= 1500 * 5
    assert a.executables_folded > 1000
    assert most <= 2 * (10 + 1)  # launches and grid: the capped names and other


def test_a_running_process_keeps_the_series_of_its_name(tmp_path: Path) -> None:
    """An exited process's counts in a series a running process of the same name adds
    to are never dropped (the running one would then read as a counter going down)."""
    p, clock = _reader(tmp_path, 5)
    _run(p, 200, "trainer", 5)
    _run(p, 201, "trainer", 7)
    p.reader.read()
    p.exit(200)
    p.reader.read()
    clock.now += 10 * EXPIRY
    assert _launches(p.reader.read()) == {"trainer": 12}
    p.exit(201)
    clock.now += 1
    assert _launches(p.reader.read()) == {"trainer": 12}
    clock.now += EXPIRY
    assert _launches(p.reader.read()) == {}


def test_the_cap_alone() -> None:
    cap = ExecutableCap(1)
    assert cap.acquire("a") == "a" and cap.acquire("a") == "a"
    assert cap.acquire("b") == OTHER
    assert cap.acquire("unknown") == "unknown" and cap.acquire(OTHER) == OTHER
    cap.release("a", "a")
    cap.release("a", "a")
    assert len(cap) == 0
    assert cap.acquire("b") == OTHER  # still folded: a process of it is
    cap.release("b", OTHER)
    cap.release("b", OTHER)
    assert cap.acquire("b") == "b"
    assert cap.folded_total == 2
