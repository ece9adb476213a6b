"""The user-space half of CUDA graphs by kernel (gpu_exporter/sources/ebpf/graphs.py) fed the
events program.c sends, for what the end-to-end test cannot provoke: full caps, lost
events, an executable graph whose event is still on its way."""

from __future__ import annotations

from collections import Counter

import pytest

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.sources.ebpf.graphs import PENDING, Graphs

TGID, RT = 42, abi.API_RUNTIME


def ev(etype: int, ident: int, target: int = 0, api: int = RT) -> bytes:
    return abi.GRAPH_EVENT.pack(etype, TGID, api, 0, 0, ident, target)


def capture(g: Graphs, capture_id: int, graph: int, kernels: list[int]) -> None:
    g.on_event(ev(abi.EV_CAPTURE_BEGIN, capture_id))
    for k in kernels:
        g.on_event(ev(abi.EV_CAPTURED_NODE, k, capture_id))
    g.on_event(ev(abi.EV_CAPTURE_END, capture_id, graph))


def test_an_executable_graph_runs_the_kernels_its_graph_had_when_instantiated() -> None:
    g = Graphs()
    capture(g, 1, 0x100, [0xA, 0xA, 0xB])
    g.on_event(ev(abi.EV_GRAPH_EXEC, 2, 0x100))
    g.on_event(ev(abi.EV_GRAPH_NODE, 0xC, 0x100))  # added later: not in serial 2
    g.on_event(ev(abi.EV_GRAPH_EXEC, 3, 0x100))
    assert g.kernels(TGID, 2) == Counter({(RT, 0xA): 2, (RT, 0xB): 1})
    assert g.kernels(TGID, 3) == Counter({(RT, 0xA): 2, (RT, 0xB): 1, (RT, 0xC): 1})
    assert g.kernels(TGID, 4) == PENDING  # its event not read yet
    assert g.dropped == 0


def test_a_clone_has_the_original_kernels_as_they_are_then() -> None:
    g = Graphs()
    capture(g, 1, 0x100, [0xA, 0xB])
    g.on_event(ev(abi.EV_GRAPH_CLONE, 0x200, 0x100))
    g.on_event(ev(abi.EV_GRAPH_NODE, 0xC, 0x100))  # the original only
    g.on_event(ev(abi.EV_GRAPH_NODE, 0xD, 0x200))  # the clone only
    g.on_event(ev(abi.EV_GRAPH_CLONE, 0x300, 0x999))  # of a graph not seen made
    for serial, graph in ((2, 0x100), (3, 0x200), (4, 0x300)):
        g.on_event(ev(abi.EV_GRAPH_EXEC, serial, graph))
    assert g.kernels(TGID, 2) == Counter({(RT, 0xA): 1, (RT, 0xB): 1, (RT, 0xC): 1})
    assert g.kernels(TGID, 3) == Counter({(RT, 0xA): 1, (RT, 0xB): 1, (RT, 0xD): 1})
    assert g.kernels(TGID, 4) is None


def test_a_child_graph_adds_its_kernels_as_they_are_then() -> None:
    g = Graphs()
    capture(g, 1, 0x100, [0xA])  # the parent
    capture(g, 2, 0x200, [0xB])  # a child
    g.on_event(ev(abi.EV_GRAPH_CHILD, 0x200, 0x100))
    g.on_event(ev(abi.EV_GRAPH_NODE, 0xC, 0x200))  # later: the child's own copy only
    g.on_event(ev(abi.EV_GRAPH_CHILD, 0x100, 0x300))  # into a graph not seen made: no
    g.on_event(ev(abi.EV_GRAPH_CREATE, 0x300))  # made after: an empty graph again
    g.on_event(ev(abi.EV_GRAPH_CHILD, 0x100, 0x300))
    g.on_event(ev(abi.EV_GRAPH_CHILD, 0x100, 0x300))  # twice: twice the kernels
    g.on_event(ev(abi.EV_GRAPH_EXEC, 3, 0x100))
    g.on_event(ev(abi.EV_GRAPH_EXEC, 4, 0x300))
    assert g.kernels(TGID, 3) == Counter({(RT, 0xA): 1, (RT, 0xB): 1})
    assert g.kernels(TGID, 4) == Counter({(RT, 0xA): 2, (RT, 0xB): 2})


def test_a_graph_with_an_unknown_child_is_unknown() -> None:
    g = Graphs()
    capture(g, 1, 0x100, [0xA])
    g.on_event(ev(abi.EV_GRAPH_CHILD, 0x999, 0x100))  # a child not seen made
    g.on_event(ev(abi.EV_GRAPH_NODE, 0xB, 0x100))
    g.on_event(ev(abi.EV_GRAPH_EXEC, 2, 0x100))
    assert g.kernels(TGID, 2) is None


def test_an_update_is_a_new_serial_and_the_old_one_keeps_its_kernels() -> None:
    g = Graphs()
    capture(g, 1, 0x100, [0xA])
    capture(g, 2, 0x200, [0xB])
    g.on_event(ev(abi.EV_GRAPH_EXEC, 3, 0x100))  # instantiated
    g.on_event(ev(abi.EV_GRAPH_EXEC, 4, 0x200))  # the same executable graph, updated
    assert g.kernels(TGID, 3) == Counter({(RT, 0xA): 1})
    assert g.kernels(TGID, 4) == Counter({(RT, 0xB): 1})


def test_retired_serials_are_listed_until_forgotten() -> None:
    g = Graphs()
    capture(g, 1, 0x100, [0xA])
    for serial in (2, 3):
        g.on_event(ev(abi.EV_GRAPH_EXEC, serial, 0x100))
    g.on_event(ev(abi.EV_GRAPH_RETIRED, 2))
    g.on_event(ev(abi.EV_GRAPH_RETIRED, 3))
    assert g.retired() == {TGID: {2, 3}}
    g.forget_serials(TGID, {2})
    assert g.retired() == {TGID: {3}}
    assert g.kernels(TGID, 3) == Counter({(RT, 0xA): 1})  # not forgotten yet
    assert g.kernels(TGID, 2) == PENDING  # as a serial never seen: no counter is left


def test_a_destroyed_graph_frees_its_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(abi, "GRAPH_NODES_MAX", 3)
    monkeypatch.setattr(abi, "GRAPHS_MAX", 2)
    g = Graphs()
    for graph in range(0x100, 0x110):  # 16 graphs of 2 nodes, one at a time
        capture(g, graph, graph, [0xA, 0xB])
        g.on_event(ev(abi.EV_GRAPH_EXEC, graph, graph))
        g.on_event(ev(abi.EV_GRAPH_DESTROY, graph))
        g.on_event(ev(abi.EV_GRAPH_RETIRED, graph))
        g.forget_serials(TGID, {graph})
    assert g.dropped == 0
    g.on_event(ev(abi.EV_GRAPH_EXEC, 0x200, 0x10F))  # of a destroyed graph: not known
    assert g.kernels(TGID, 0x200) is None


def test_a_graph_not_seen_made_or_without_kernels_is_unknown() -> None:
    g = Graphs()
    g.on_event(ev(abi.EV_GRAPH_NODE, 0xA, 0x200))  # a graph created before we looked
    g.on_event(ev(abi.EV_GRAPH_EXEC, 1, 0x200))
    g.on_event(ev(abi.EV_GRAPH_CREATE, 0x300))
    g.on_event(ev(abi.EV_GRAPH_EXEC, 2, 0x300))  # empty as far as we know
    capture(g, 3, 0, [0xA])  # a capture that failed: no graph
    assert g.kernels(TGID, 1) is None and g.kernels(TGID, 2) is None


def test_lost_events_make_what_was_being_built_unknown() -> None:
    g = Graphs()
    capture(g, 1, 0x100, [0xA])
    g.on_event(ev(abi.EV_GRAPH_EXEC, 2, 0x100))
    g.on_event(ev(abi.EV_CAPTURE_BEGIN, 3))
    g.on_event(ev(abi.EV_CAPTURED_NODE, 0xB, 3))
    g.events_lost(last_serial=5)  # e.g. a node of capture 3 and the event of serial 4
    g.on_event(ev(abi.EV_CAPTURE_END, 3, 0x400))
    g.on_event(ev(abi.EV_GRAPH_EXEC, 6, 0x400))
    g.on_event(ev(abi.EV_GRAPH_EXEC, 5, 0x100))  # given before the loss, read after it
    assert g.kernels(TGID, 2) == Counter({(RT, 0xA): 1})  # instantiated before: intact
    assert g.kernels(TGID, 4) is None  # its event was lost
    assert g.kernels(TGID, 5) is None
    assert g.kernels(TGID, 6) is None  # its capture may miss a node
    assert g.kernels(TGID, 7) == PENDING


@pytest.mark.parametrize("what", ["nodes", "execs", "clone", "child"])
def test_caps_count_drops_and_leave_the_rest_unknown(what: str, monkeypatch: pytest.MonkeyPatch
                                                     ) -> None:
    monkeypatch.setattr(abi, "GRAPH_NODES_MAX", 3)
    monkeypatch.setattr(abi, "GRAPHS_MAX", 2)
    g = Graphs()
    if what == "nodes":
        capture(g, 1, 0x100, [0xA, 0xB, 0xC, 0xD])  # the 4th node is one too many
        g.on_event(ev(abi.EV_GRAPH_EXEC, 2, 0x100))
        assert g.dropped == 1 and g.kernels(TGID, 2) is None
    elif what in ("clone", "child"):
        capture(g, 1, 0x100, [0xA, 0xB])  # a copy of its 2 nodes: 4 kept, one too many
        if what == "clone":
            g.on_event(ev(abi.EV_GRAPH_CLONE, 0x200, 0x100))
        else:
            g.on_event(ev(abi.EV_GRAPH_CHILD, 0x100, 0x100))
        g.on_event(ev(abi.EV_GRAPH_EXEC, 2, 0x100))
        g.on_event(ev(abi.EV_GRAPH_EXEC, 3, 0x200))
        assert g.dropped == 1
        # the original intact (unless it was the parent), the copy unknown
        assert g.kernels(TGID, 2) == (
            Counter({(RT, 0xA): 1, (RT, 0xB): 1}) if what == "clone" else None)
        assert g.kernels(TGID, 3) is None
        g.on_event(ev(abi.EV_GRAPH_NODE, 0xC, 0x100))  # room for a node still
        assert g.dropped == 1
    else:
        capture(g, 1, 0x100, [0xA])
        for serial in (2, 3, 4):
            g.on_event(ev(abi.EV_GRAPH_EXEC, serial, 0x100))
        assert g.dropped == 1
        assert g.kernels(TGID, 3) == Counter({(RT, 0xA): 1})
        assert g.kernels(TGID, 4) is None  # not kept: unknown, not pending


def test_a_process_given_up_on_has_no_pending_graph() -> None:
    g = Graphs()
    assert g.kernels(TGID, 9) == PENDING
    g.give_up(TGID)
    assert g.kernels(TGID, 9) is None


def test_exited_processes_are_forgotten() -> None:
    g = Graphs()
    capture(g, 1, 0x100, [0xA])
    g.on_event(ev(abi.EV_GRAPH_EXEC, 2, 0x100))
    g.prune(lambda tgid: tgid != TGID)
    assert g.kernels(TGID, 2) == PENDING  # nothing kept: as for a process never seen
