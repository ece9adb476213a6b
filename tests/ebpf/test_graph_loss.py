"""Graph records lost to a full event buffer, in the order the event loop reads them: the
engine's event loop alone (events.EventLoop, no thread) over the BPF program's own maps
(compiled and loaded by bcc, no probe attached), handed graph records as libbpf hands
them (the ring buffer's callback), with the loss counted in the `drops` map as the probes
count it and carried in every graph record after it (program.c: graph_event). The
end-to-end path cannot place a loss between two records of one graph on demand;
tests/drills covers whole floods."""

from __future__ import annotations

import ctypes
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.sources.ebpf.events import EventLoop
from gpu_exporter.sources.ebpf.graphs import Graphs
from gpu_exporter.sources.ebpf.libraries import Scanner
from gpu_exporter.sources.ebpf.library_probes import Attacher
from gpu_exporter.sources.ebpf.loader import Program, load_bpf
from gpu_exporter.sources.ebpf.names import NameCap
from gpu_exporter.sources.ebpf.rescans import Scans
from gpu_exporter.sources.ebpf.resolve import Resolver

TGID, RT = 4_000_100, abi.API_RUNTIME
A, B = 0xA000, 0xB000  # kernels (host functions)


@pytest.fixture
def loop() -> Iterator[EventLoop]:
    import bcc

    bpf = load_bpf(bcc)
    try:
        with tempfile.TemporaryDirectory() as procfs:
            program = Program()
            program.bpf = bpf  # the maps alone: no probe attached, no thread
            stop = threading.Event()
            resolver = Resolver(procfs, NameCap(10))
            scans = Scans(procfs, program, Scanner(procfs), resolver, Attacher(program, stop),
                          stop)
            e = EventLoop(program, scans, Graphs(), resolver, stop, rescan_interval=3600)
            bpf["events"].open_ring_buffer(e.on_event)
            yield e
    finally:
        bpf.cleanup()


def _count(e: EventLoop, name: str, key: int, value: int) -> None:
    table = e.program.bpf[name]
    table[table.Key(key)] = table.Leaf(value)


def _read(e: EventLoop, etype: int, ident: int, target: int = 0, lost: int = 0) -> None:
    """One graph record read by the event loop: `lost`, the graph records lost before
    it was written, as program.c writes it."""
    raw = abi.GRAPH_EVENT.pack(etype, TGID, RT, 0, lost, ident, target)
    buf = ctypes.create_string_buffer(raw, len(raw))
    assert e.on_event(None, ctypes.addressof(buf), len(raw)) == 0


def test_a_graph_missing_a_lost_node_is_unknown_and_one_built_after_is_named(
        loop: Any) -> None:
    e: EventLoop = loop
    # Graph 0x100: node A read, node B lost to the full buffer, then instantiated
    # (serial 1): its instantiation is read in the same turn of the loop as the loss.
    _read(e, abi.EV_GRAPH_CREATE, 0x100)
    _read(e, abi.EV_GRAPH_NODE, A, 0x100)
    _count(e, "drops", abi.DROP_GRAPH_EVENTS_FULL, 1)  # node B
    _read(e, abi.EV_GRAPH_EXEC, 1, 0x100, lost=1)
    # Graph 0x200 built whole after the loss (serial 2); serial 3's record lost too.
    _read(e, abi.EV_GRAPH_CREATE, 0x200, lost=1)
    _read(e, abi.EV_GRAPH_NODE, A, 0x200, lost=1)
    _read(e, abi.EV_GRAPH_NODE, B, 0x200, lost=1)
    _read(e, abi.EV_GRAPH_EXEC, 2, 0x200, lost=1)
    _count(e, "drops", abi.DROP_GRAPH_EVENTS_FULL, 2)  # serial 3's instantiation
    _count(e, "graph_state", 2, 3)  # the last serial given
    assert e.graphs.kernels(TGID, 3) == "pending"  # until the buffer is read out
    e.read_out()  # the end of the loop's turn
    assert e.graphs.kernels(TGID, 1) is None  # not short of node B: unknown
    assert e.graphs.kernels(TGID, 2) == Counter({(RT, A): 1, (RT, B): 1})
    assert e.graphs.kernels(TGID, 3) is None  # its record was lost
    assert e.graphs.kernels(TGID, 4) == "pending"
