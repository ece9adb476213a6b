"""CUDA graphs as the probes saw them built: the kernel nodes of each graph (captured
from a stream, added one by one, cloned, or gained with a child graph) and of each
executable graph instantiated from it (or updated to it: a new serial, so that earlier
launches keep the kernels they ran), so that a graph launch counts every kernel it runs
under the kernel's own name. A serial retired (its executable graph updated or
destroyed) is forgotten once its counters are folded, a graph destroyed at once.

Fed by the `graph_events` ring buffer (program.c), in the order the calls returned. What
was not seen whole (a graph made before the exporter started, an event lost to a full
buffer, a node beyond the caps) is not known: its launches stay one `unknown` count.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from gpu_exporter.model import ebpf_abi as abi

Node = tuple[int, int]  # (the api of the kernel's launch key, the kernel's id)
Nodes = list[Node] | None  # None: not known whole
PENDING: Final = "pending"  # the executable graph's event has not been read yet


@dataclass
class _Process:
    graphs: dict[int, Nodes] = field(default_factory=dict)  # graph handle -> its kernels
    captures: dict[int, tuple[int, Nodes]] = field(default_factory=dict)  # id -> (to graph, nodes)
    execs: dict[int, Counter[Node] | None] = field(default_factory=dict)  # serial -> kernels
    nodes: int = 0  # kept in graphs and captures, against GRAPH_NODES_MAX
    retired: set[int] = field(default_factory=set)  # serials no launch counts by any more
    unknown_upto: int = 0  # executable graphs not kept (the cap): serials up to this


class Graphs:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: dict[int, _Process] = {}
        self.dropped = 0  # nodes and graphs not kept (the caps)
        # Serials up to this one whose event was not read when events were lost: unknown.
        self._lost_upto = 0

    def on_event(self, data: bytes) -> tuple[int, int, int] | None:
        """One graph event; returns a kernel node to name while its process lives:
        (tgid, api, kernel id)."""
        etype, tgid, api, _, _, ident, target = abi.GRAPH_EVENT.unpack_from(data)
        with self._lock:
            p = self._procs.setdefault(tgid, _Process())
            if etype == abi.EV_GRAPH_CREATE:
                self._set_graph(p, ident, [])
            elif etype == abi.EV_GRAPH_NODE:
                return self._add(p, p.graphs.get(target), (api, ident), tgid)
            elif etype == abi.EV_CAPTURE_BEGIN:
                if len(p.captures) >= abi.GRAPHS_MAX:
                    self.dropped += 1
                else:
                    p.captures[ident] = (target, [])
            elif etype == abi.EV_CAPTURED_NODE:
                capture = p.captures.get(target)
                return self._add(p, capture[1] if capture else None, (api, ident), tgid)
            elif etype == abi.EV_CAPTURE_END:
                to_graph, nodes = p.captures.pop(ident, (0, None))
                p.nodes -= len(nodes or ())
                if target and to_graph:  # ...ToGraph: added to what the graph had
                    had = p.graphs.get(to_graph)
                    nodes = None if had is None or nodes is None else had + nodes
                if target:
                    self._set_graph(p, target, nodes)
            elif etype == abi.EV_GRAPH_CLONE:
                self._set_graph(p, ident, self._copy(p, p.graphs.get(target)))
            elif etype == abi.EV_GRAPH_CHILD:
                self._add_child(p, target, p.graphs.get(ident))
            elif etype == abi.EV_GRAPH_DESTROY:
                p.nodes -= len(p.graphs.pop(ident, None) or ())
            elif etype == abi.EV_GRAPH_RETIRED:
                p.retired.add(ident)
            elif etype == abi.EV_GRAPH_EXEC:
                nodes = p.graphs.get(target)
                # Already judged lost (read late: its record was reserved before the
                # loss was applied and written after): it stays unknown.
                lost = ident <= self._lost_upto
                if len(p.execs) >= abi.GRAPHS_MAX:
                    self.dropped += 1
                    p.unknown_upto = max(p.unknown_upto, ident)
                else:
                    # A graph with no kernel known is not known to be empty.
                    p.execs[ident] = Counter(nodes) if nodes and not lost else None
        return None

    def _set_graph(self, p: _Process, graph: int, nodes: Nodes) -> None:
        old = p.graphs.pop(graph, None)
        p.nodes -= len(old or ())
        if len(p.graphs) >= abi.GRAPHS_MAX:
            self.dropped += 1
            return
        p.graphs[graph] = nodes
        p.nodes += len(nodes or ())

    def _copy(self, p: _Process, nodes: Nodes) -> Nodes:
        """A copy of `nodes` to be kept in `p` (a clone, a child graph): None when not
        known whole, or when it would pass GRAPH_NODES_MAX (a drop)."""
        if nodes is None:
            return None
        if p.nodes + len(nodes) > abi.GRAPH_NODES_MAX:
            self.dropped += 1
            return None
        return list(nodes)

    def _add_child(self, p: _Process, parent: int, child: Nodes) -> None:
        """Graph `parent` gains the kernel nodes `child` has now (CUDA copies the child
        graph into the node): not known whole when the child is not."""
        nodes = p.graphs.get(parent)
        if nodes is None:
            return
        added = self._copy(p, child)
        if added is None:
            p.graphs[parent] = None
            p.nodes -= len(nodes)
        else:
            nodes.extend(added)
            p.nodes += len(added)

    def _add(self, p: _Process, nodes: Nodes, node: Node, tgid: int
             ) -> tuple[int, int, int] | None:
        if nodes is None:
            return None
        if p.nodes >= abi.GRAPH_NODES_MAX:
            self.dropped += 1
            self._taint(p)
            return None
        nodes.append(node)
        p.nodes += 1
        return (tgid, *node)

    def _taint(self, p: _Process) -> None:
        """What is being built in `p` is not known whole any more."""
        for graph in p.graphs:
            p.graphs[graph] = None
        for capture, (to_graph, _) in p.captures.items():
            p.captures[capture] = (to_graph, None)
        p.nodes = 0

    def events_lost(self, last_serial: int) -> None:
        """Graph events were lost (a full ring buffer): every graph and capture being
        built may miss a node, and executable graphs given a serial up to `last_serial`
        whose event was not read are unknown."""
        self.building_lost()
        self.serials_lost(last_serial)

    def building_lost(self) -> None:
        """Graph events were lost before the next one read: every graph and capture
        being built may miss a node."""
        with self._lock:
            for p in self._procs.values():
                self._taint(p)

    def serials_lost(self, last_serial: int) -> None:
        """Every event written before `last_serial` was given has been read (or lost):
        executable graphs given a serial up to it whose event was not read are unknown."""
        with self._lock:
            self._lost_upto = max(self._lost_upto, last_serial)

    def give_up(self, tgid: int) -> None:
        """The executable graphs of `tgid` whose events were not read are unknown."""
        with self._lock:
            self._procs.setdefault(tgid, _Process()).unknown_upto = 1 << 63

    def kernels(self, tgid: int, serial: int) -> Counter[Node] | str | None:
        """The kernel nodes (with their multiplicity) an executable graph runs; None when
        not known; PENDING when its event may still be on its way."""
        with self._lock:
            p = self._procs.get(tgid)
            if p is not None and serial in p.execs:
                return p.execs[serial]
            known_upto = max(self._lost_upto, p.unknown_upto if p else 0)
            return None if serial <= known_upto else PENDING

    def retired(self) -> dict[int, set[int]]:
        """The serials of each process that no launch counts by any more: their
        counters, as read from now on, are final."""
        with self._lock:
            return {tgid: set(p.retired) for tgid, p in self._procs.items() if p.retired}

    def forget_serials(self, tgid: int, serials: set[int]) -> None:
        """Retired serials whose counters are folded: their kernels are not needed."""
        with self._lock:
            p = self._procs.get(tgid)
            if p is not None:
                for serial in serials:
                    p.execs.pop(serial, None)
                p.retired -= serials

    def forget(self, tgid: int) -> None:
        with self._lock:
            self._procs.pop(tgid, None)

    def prune(self, keep: Callable[[int], bool]) -> None:
        """Forget the processes `keep` says no (exited, with nothing left to count)."""
        with self._lock:
            for tgid in [t for t in self._procs if not keep(t)]:
                del self._procs[tgid]
