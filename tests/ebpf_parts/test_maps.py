"""The maps' reader and its folding alone (gpu_exporter/sources/ebpf/maps.py), on map contents the
test writes as the probes would (tests/ebpf_parts/bpf_maps.py: program.c's structs in
memory): no bcc, no root, no probe. What the probes count end to end is tests/ebpf/'s."""

from __future__ import annotations

import ctypes
from pathlib import Path

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.sources.ebpf.reading import CudaActivity
from tests.ebpf_parts.parts import LIBRARY, Parts, parts

TGID, OTHER_TGID = 4_000_300, 4_000_301
GEMM, RELU = 0x1000, 0x2000  # driver kernels (CUfunction handles)
MALLOC = next(i for i, p in enumerate(abi.ALL_PROBES) if p.symbol == "cudaMalloc")
SERIAL = 3
GRAPH = abi.GRAPH_SERIAL_BIT | SERIAL  # a graph launch counter's id


def _launches(a: CudaActivity) -> dict[tuple[str, str, int | None], int]:
    return {(x.kernel_name, x.api, x.pid): x.count for x in a.launches}


def _trainer(p: Parts, tgid: int) -> None:
    """A process that ran two driver kernels (one counted in its shape value), made one
    failed allocation, had launches awaiting a completion point on a stream and an event
    recorded (`streams`, `cuda_events`, `proc_streams`), and was in the middle of a graph's
    instantiation (`execs`)."""
    p.process(tgid, "trainer")
    p.name(tgid, GEMM, "_Z6k_gemmv")
    p.name(tgid, RELU, "_Z6k_relui")
    p.count(tgid, abi.FAM_LAUNCH, abi.API_DRIVER, GEMM, 5)
    p.count(tgid, abi.FAM_ERROR, MALLOC, 2, 1)
    p.shape(tgid, slot=3 if tgid == TGID else 4, grid_slot=2, n=12,
            launches=[(abi.API_DRIVER, RELU, 7)])
    for name in ("streams", "cuda_events"):
        table = p.maps[name]
        table[table.Key(tgid, 0, 0x5000)] = table.Leaf(1)
    p.maps["proc_streams"][ctypes.c_uint32(tgid)] = p.maps["proc_streams"].Leaf(1)
    execs = p.maps["execs"]
    execs[execs.Key(tgid, 0, 0x77)] = ctypes.c_uint64(1)


def test_an_exited_process_is_folded_out_of_the_maps_and_still_counted_once(
        tmp_path: Path) -> None:
    p = parts(tmp_path)
    _trainer(p, TGID)
    _trainer(p, OTHER_TGID)  # still running: left in the maps
    first = p.reader.read()
    assert _launches(first) == {("k_gemm", "driver", TGID): 5,
                                ("k_relu", "driver", TGID): 7,
                                ("k_gemm", "driver", OTHER_TGID): 5,
                                ("k_relu", "driver", OTHER_TGID): 7}
    assert first.attached_libraries == [LIBRARY]

    p.exit(TGID)
    for _ in range(2):  # folded at the first read, then read from our own totals
        again = p.reader.read()
        assert _launches(again) == _launches(first)
        assert again.errors == first.errors and again.grid_size == first.grid_size
    stats = p.maps["stats"]
    assert {int(k.tgid) for k, _ in stats.items()} == {OTHER_TGID}
    assert {int(k.value) for k, _ in p.maps["proc_slots"].items()} == {OTHER_TGID}
    assert p.maps["shapes"][ctypes.c_uint32(3)].tgid == 0  # zeroed, and given back:
    assert p.maps["free_slots"].values == [3]
    assert int(p.maps["shapes"][ctypes.c_uint32(4)].tgid) == OTHER_TGID
    for name in ("streams", "cuda_events"):
        assert [int(k.tgid) for k, _ in p.maps[name].items()] == [OTHER_TGID]
    assert [int(k.value) for k, _ in p.maps["proc_streams"].items()] == [OTHER_TGID]
    assert [int(k.tgid) for k, _ in p.maps["execs"].items()] == [OTHER_TGID]


def test_an_exited_process_is_held_back_until_its_graph_event_is_read(tmp_path: Path) -> None:
    """Its graph launches wait for the executable graph's record (the event loop has not
    polled since): then they count by the graph's kernels, and the process is folded."""
    p = parts(tmp_path)
    p.process(TGID, "trainer")
    p.name(TGID, GEMM, "_Z6k_gemmv")
    p.name(TGID, RELU, "_Z6k_relui")
    p.count(TGID, abi.FAM_LAUNCH, abi.API_GRAPH, GRAPH, 4)
    p.shape(TGID, slot=5, grid_slot=0, n=0, launches=[(abi.API_GRAPH, GRAPH, 2)])
    assert p.resolver.executable(TGID) == "trainer"  # its first record read while it lived
    p.exit(TGID)
    for _ in range(3):
        assert _launches(p.reader.read()) == {}
        assert len(p.maps["stats"]) == 1  # held: not folded
        assert p.maps["free_slots"].values == []
    p.graph(TGID, SERIAL, [(abi.API_DRIVER, GEMM), (abi.API_DRIVER, RELU)])
    assert _launches(p.reader.read()) == {("k_gemm", "graph", TGID): 4 + 2,
                                          ("k_relu", "graph", TGID): 4 + 2}
    assert len(p.maps["stats"]) == 0
    assert p.maps["free_slots"].values == [5]


def test_a_process_that_exited_before_its_name_was_read_waits_for_its_records(
        tmp_path: Path) -> None:
    """A short program read right after it ended (its /proc entry gone, its records, which
    carry its command, not read yet) is left out until the event loop has read what was
    written before, not reported for ever under process_executable_name="unknown"."""
    p = parts(tmp_path)
    p.process(TGID, "trainer")
    p.count(TGID, abi.FAM_LAUNCH, abi.API_HIP, GEMM, 3)
    p.exit(TGID)
    assert p.reader.read().launches == []  # held: no name yet
    assert len(p.maps["stats"]) == 1
    p.resolver.executable(TGID, "trainer")  # its new key's record, with its command
    launches = p.reader.read().launches
    assert [(x.executable, x.api, x.count) for x in launches] == [("trainer", "hip", 3)]
    assert len(p.maps["stats"]) == 0  # folded


def test_a_held_process_is_given_up_once_the_loop_has_read_past_its_exit(
        tmp_path: Path) -> None:
    """Two polls begun and returned since the process was first held: its graph's record
    was lost, and its launches count once, by an unknown kernel."""
    p = parts(tmp_path)
    p.process(TGID, "trainer")
    p.count(TGID, abi.FAM_LAUNCH, abi.API_GRAPH, GRAPH, 4)
    p.exit(TGID)
    assert _launches(p.reader.read()) == {}
    p.polls.begun = p.polls.done = 1
    assert _launches(p.reader.read()) == {}  # one poll may stop at a record being written
    p.polls.begun = p.polls.done = 2
    given_up = _launches(p.reader.read())
    assert given_up == {("unknown", "graph", TGID): 4}
    assert len(p.maps["stats"]) == 0
    assert _launches(p.reader.read()) == given_up
