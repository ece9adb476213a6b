"""A property of the eBPF collector's counts, over the whole path from what the probes
count to what a scrape renders: whatever mix of processes (several of one executable
name), calls (each API, errors, copies, allocations, synchronisations, launch shapes,
graph launches), devices (known or not, a GPU or a MIG device, several by ordinal, learned
mid-run), processes exiting, with or without --ebpf.pid-label:

- every scrape renders the CUDA families (the collector never fails);
- every series is there at every later scrape, and never goes down;
- in every scrape the launches (errors, histogram observations) over all series are
  exactly those counted.

The counters are written into the BPF program's own maps (compiled and loaded by bcc; no
probe attached) as the probes write them, the names and devices the probes tell come as
the ring buffer's records, the processes are a /proc tree, and NVML's process lists are
what the test says NVML lists that scrape; the exporter renders each scrape with the
nvidia collector over the fake NVML (tests/fake_nvml), so device labels are joined as in
production. Needs root and bcc, as the rest of tests/ebpf.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest

from gpu_exporter.collectors import NvidiaCollector
from gpu_exporter.collectors.ebpf import EbpfCollector
from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.model.settings import Settings
from gpu_exporter.scrape.exporter import GpuExporterCollector, make_registry
from gpu_exporter.sources.ebpf.engine import Engine
from gpu_exporter.sources.ebpf.loader import load_bpf
from gpu_exporter.sources.ebpf.reading import CudaActivity, NvmlView
from tests.fake_nvml import scenario as fake
from tests.helpers import Series, parse

FIRST_TGID = 4_000_000  # above any pid_max: never a process of this machine
EXES = ("python", "python", "python", "trainer")  # most processes share a name
KERNELS = {0x1000: "_Z6k_gemmv", 0x2000: "_Z6k_relui", 0x3000: "_Z6k_copyv"}  # driver
SERIAL = 7  # the executable graph every process instantiates: two kernel nodes
GRAPH_NODES = ((abi.API_DRIVER, 0x1000), (abi.API_DRIVER, 0x2000))


def _devices() -> tuple[fake.Scenario, tuple[str, ...]]:
    """Two GPUs and a GPU in MIG mode (its MIG devices are devices of their own)."""
    mig = fake.mig_h100().devices[0]
    mig.pci_bus_id = fake.h100(2).pci_bus_id
    sc = fake.Scenario(devices=[fake.h100(0), fake.h100(1), mig])
    keys = (fake.h100(0).uuid, fake.h100(1).uuid, mig.migs[0].uuid, mig.migs[1].uuid)
    return sc, keys


SCENARIO, DEVICES = _devices()
HISTOGRAMS = {abi.FAM_COPY: "gpu_memory_copies_bytes_count",
              abi.FAM_SYNC: "gpu_sync_duration_seconds_count",
              abi.FAM_ALLOC: "gpu_memory_allocations_bytes_count"}
CUDA_FAMILIES = ("gpu_kernel_", "gpu_memory_copies_", "gpu_memory_allocations_", "gpu_sync_",
                 "gpu_cuda_errors_")
ERROR_CALLS = tuple(i for i, p in enumerate(abi.ALL_PROBES)
                    if p.symbol in ("cudaMalloc", "cuLaunchKernel", "cudaMemcpy"))


@dataclass(frozen=True)
class Count:
    """One counter of the BPF maps, as the probes keep it (program.c: struct skey, or a
    launch counter of the process's shape value)."""

    fam: int
    sub: int
    ident: int
    dev: int  # the calling thread's device: DEV_NONE, ordinal + 1, DEV_UNKNOWN
    slot: int = 0
    in_shape: bool = False  # a launch counter of struct shape (struct lslot)

    def launches(self, n: int) -> int:
        if self.fam != abi.FAM_LAUNCH:
            return 0
        graph = self.sub == abi.API_GRAPH and self.ident & abi.GRAPH_SERIAL_BIT
        return n * (len(GRAPH_NODES) if graph else 1)


@dataclass(frozen=True)
class Proc:
    exe: str
    listed_from: int | None  # the first scrape NVML lists it at (None: never)
    on: tuple[str, ...]  # the devices NVML lists it on: one, or two (told ordinal 0's)
    exits_after: int | None  # the last scrape it is alive at
    counts: tuple[Count, ...]
    grid_slot: int  # a launch shape it records (log2 slot of blocks per grid)


devs = st.sampled_from((abi.DEV_NONE, 1, 2, abi.DEV_UNKNOWN))
counts = st.one_of(
    st.builds(Count, fam=st.just(abi.FAM_LAUNCH),
              sub=st.sampled_from((abi.API_RUNTIME, abi.API_DRIVER)),
              ident=st.sampled_from(sorted(KERNELS)), dev=devs, in_shape=st.booleans()),
    st.builds(Count, fam=st.just(abi.FAM_LAUNCH), sub=st.just(abi.API_GRAPH),
              ident=st.sampled_from((SERIAL | abi.GRAPH_SERIAL_BIT, 0x7000)), dev=devs),
    st.builds(Count, fam=st.just(abi.FAM_ERROR), sub=st.sampled_from(ERROR_CALLS),
              ident=st.sampled_from((2, 100, 700)), dev=devs),
    st.builds(Count, fam=st.sampled_from((abi.FAM_COPY, abi.FAM_SYNC)),
              sub=st.integers(0, 3), ident=st.just(0), dev=devs, slot=st.integers(0, 8)),
    st.builds(Count, fam=st.just(abi.FAM_ALLOC),
              sub=st.sampled_from((abi.API_RUNTIME, abi.API_DRIVER | 1 << 8)), ident=st.just(0),
              dev=devs, slot=st.integers(0, 8)),
)
procs = st.builds(
    Proc, exe=st.sampled_from(EXES), listed_from=st.none() | st.integers(0, 4),
    on=st.one_of(st.tuples(st.sampled_from(DEVICES)),
                 st.lists(st.sampled_from(DEVICES), min_size=2, max_size=2, unique=True
                          ).map(tuple)),
    exits_after=st.none() | st.integers(0, 4),
    # One Count per counter of the maps (two would be the same counter).
    counts=st.lists(counts, max_size=6, unique_by=lambda c: (
        c.fam, c.sub, c.ident, c.dev, c.slot, c.in_shape)).map(tuple),
    grid_slot=st.integers(0, 16))
runs = st.tuples(st.lists(procs, min_size=1, max_size=5), st.booleans(),
                 st.integers(2, 5), st.randoms(use_true_random=False))


@pytest.fixture(scope="module")
def maps() -> Iterator[Any]:
    import bcc

    bpf = load_bpf(bcc)
    try:
        yield bpf
    finally:
        bpf.cleanup()


@pytest.fixture(scope="module")
def nvml(tmp_path_factory: pytest.TempPathFactory) -> None:
    fake.load_in_process(SCENARIO.write(tmp_path_factory.mktemp("nvml") / "node.scenario"))


class _Source:
    """The engine, read with NVML's process lists as the test lists them this scrape
    (the collector's own NVML reading needs processes NVML runs)."""

    mechanism = "uprobe_multi"
    wanted_mechanism = "auto"
    mechanism_problem: str | None = None
    tracking_problem: str | None = None

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.view = NvmlView({}, True, {})

    def read(self, nvml: NvmlView | None = None) -> CudaActivity:
        return self.engine.read(self.view)

    def close(self) -> None:
        pass


def _clear(bpf: Any) -> None:
    for name in ("stats", "proc_slots", "execs", "streams", "cuda_events", "proc_streams"):
        bpf[name].clear()
    shapes = bpf["shapes"]
    for slot in range(1, 8):
        shapes[shapes.Key(slot)] = shapes.Leaf()
    free = bpf["free_slots"]
    with contextlib.suppress(KeyError):
        while True:
            free.pop()


def _event(etype: int, tgid: int, ident: int, payload: bytes = b"") -> bytes:
    return abi.EVENT_HEAD.pack(etype, tgid, 0, 0, 0, ident, 0, b"") + payload.ljust(
        abi.NAME_LEN, b"\0")


def _graph_event(etype: int, tgid: int, api: int, ident: int, target: int) -> bytes:
    return abi.GRAPH_EVENT.pack(etype, tgid, api, 0, 0, ident, target)


def _uuid_bytes(key: str) -> bytes:
    return bytes.fromhex(key.split("-", 1)[1].replace("-", ""))


def _tell(engine: Engine, tgid: int, p: Proc) -> None:
    """What the probes tell of a process through the ring buffer: its driver kernels'
    names, its graph (built and instantiated), the device it was told ordinal 0 is."""
    for handle, name in KERNELS.items():
        engine.resolver.on_event(_event(abi.EV_HANDLE_NAME, tgid, handle, name.encode()))
    graph = 0x55
    engine.graphs.on_event(_graph_event(abi.EV_GRAPH_CREATE, tgid, 0, graph, 0))
    for api, kernel in GRAPH_NODES:
        engine.graphs.on_event(_graph_event(abi.EV_GRAPH_NODE, tgid, api, kernel, graph))
    engine.graphs.on_event(_graph_event(abi.EV_GRAPH_EXEC, tgid, 0, SERIAL, graph))
    engine.resolver.on_event(_event(abi.EV_DEVICE_UUID, tgid, 0, _uuid_bytes(p.on[0])))


def _write(bpf: Any, tgid: int, slot: int, p: Proc, values: list[int]) -> None:
    """The process's counters as the probes left them (each only ever grows)."""
    stats = bpf["stats"]
    shapes, slots = bpf["shapes"], bpf["proc_slots"]
    shape = shapes.Leaf()
    shape.tgid = tgid
    sums: dict[tuple[int, int, int, int], int] = defaultdict(int)
    for i, (c, n) in enumerate(zip(p.counts, values, strict=True)):
        if not n:
            continue
        if c.in_shape:
            shape.launches[i].tag = c.ident | c.sub << 48 | c.dev << 56
            shape.launches[i].n = n
            continue
        stats[stats.Key(tgid, c.fam, c.sub, c.ident, c.slot, c.dev)] = stats.Leaf(n)
        if c.fam in HISTOGRAMS:
            sums[(c.fam, c.sub, c.ident, c.dev)] += n << c.slot  # values of 2^slot
    for (fam, sub, ident, dev), total in sums.items():
        stats[stats.Key(tgid, fam, sub, ident, abi.SLOT_SUM, dev)] = stats.Leaf(total)
    shape.grid[p.grid_slot] = shaped(p, values)
    shape.grid_sum = shaped(p, values) << p.grid_slot
    shapes[shapes.Key(slot)] = shape
    slots[slots.Key(tgid)] = slots.Leaf(slot)


def shaped(p: Proc, values: list[int]) -> int:
    """The launches whose shapes the process's shape value holds (not graph launches)."""
    return sum(n for c, n in zip(p.counts, values, strict=True)
               if c.fam == abi.FAM_LAUNCH and c.sub != abi.API_GRAPH)


def _render(exporter: GpuExporterCollector) -> list[Series]:
    return parse(generate_latest(make_registry(exporter)).decode())


def _total(series: list[Series], name: str) -> float:
    return sum(s.value for s in series if s.name == name)


@given(runs)
@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_counts_render_whole_and_never_go_down(maps: Any, nvml: None,
                                              run: tuple[list[Proc], bool, int, Any]) -> None:
    plan, pid_label, scrapes, rnd = run
    _clear(maps)
    with tempfile.TemporaryDirectory() as procfs:
        engine = Engine(procfs, names_max=100, pid_label=pid_label, rescan_interval=3600)
        engine.program.bpf = maps  # the maps alone: no probe attached, no event loop
        source = _Source(engine)

        class Ebpf(EbpfCollector):
            def __init__(self, s: Settings) -> None:
                super().__init__(s, source=source)

        exporter = GpuExporterCollector(
            Settings(enabled_collectors=frozenset({"nvidia", "ebpf"}),
                     scrape_timeout_seconds=30.0), [NvidiaCollector, Ebpf])
        tgids = [FIRST_TGID + i for i in range(len(plan))]
        for tgid, p in zip(tgids, plan, strict=True):
            os.makedirs(f"{procfs}/{tgid}")
            os.symlink(f"/opt/app/bin/{p.exe}", f"{procfs}/{tgid}/exe")
            _tell(engine, tgid, p)
        values = [[0] * len(p.counts) for p in plan]
        made: dict[str | int, int] = defaultdict(int)  # "launches", "shapes", families
        seen: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        try:
            exporter.start()
            for scrape in range(scrapes):
                devices_of = {}
                for i, (tgid, p) in enumerate(zip(tgids, plan, strict=True)):
                    if p.exits_after is not None and scrape > p.exits_after:
                        if os.path.exists(f"{procfs}/{tgid}"):
                            Path(f"{procfs}/{tgid}/exe").unlink()
                            os.rmdir(f"{procfs}/{tgid}")
                        continue
                    before = shaped(p, values[i])
                    for j, c in enumerate(p.counts):
                        more = rnd.randint(0, 3)
                        values[i][j] += more
                        made["launches"] += c.launches(more)
                        made[c.fam] += more
                    made["shapes"] += shaped(p, values[i]) - before
                    _write(maps, tgid, i + 1, p, values[i])
                    if p.listed_from is not None and scrape >= p.listed_from:
                        devices_of[tgid] = frozenset(p.on)
                source.view = NvmlView(devices_of, True, {})
                series = _render(exporter)
                where = f"scrape {scrape} of {plan}, pid label {pid_label}"
                assert [s.value for s in series if s.name == "gpu_exporter_collector_success"
                        and s.labels["collector"] == "ebpf"] == [1], where
                assert _total(series, "gpu_kernel_launch_calls_total") == made["launches"], where
                assert _total(series, "gpu_cuda_errors_total") == made[abi.FAM_ERROR], where
                for fam, name in HISTOGRAMS.items():
                    assert _total(series, name) == made[fam], (name, where)
                assert _total(series, "gpu_kernel_grid_size_count") == made["shapes"], where
                now = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in series
                       if s.name.startswith(CUDA_FAMILIES)}
                for key, before in seen.items():
                    assert key in now, (key, "gone", where)
                    assert now[key] >= before, (key, before, now[key], where)
                seen = now
        finally:
            exporter.close()
