"""The event loop: a thread that reads the BPF program's ring buffers (the names, devices
and graphs the probes tell; the processes that exec'd or mapped a file), scans what they
name, and rescans every process on an interval. It tracks the graph records lost, and
marks each poll (Polls), so that the maps' reader knows which events were read.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.sources.ebpf.durations import Durations
from gpu_exporter.sources.ebpf.graphs import Graphs
from gpu_exporter.sources.ebpf.loader import Program, scalar
from gpu_exporter.sources.ebpf.rescans import Scans
from gpu_exporter.sources.ebpf.resolve import Resolver

log = logging.getLogger("gpu_exporter.ebpf")

_POLL_MS = 100


@dataclass
class Polls:
    """The event loop's polls: `begun` counts those begun; `done` is the last begun that
    returned (the events written before it began are read, or counted lost)."""

    begun: int = 0
    done: int = 0


class EventLoop:
    def __init__(self, program: Program, scans: Scans, graphs: Graphs, resolver: Resolver,
                 stop: threading.Event, rescan_interval: float) -> None:
        self.program = program
        self.scans = scans
        self.graphs = graphs
        self.resolver = resolver
        self.rescan_interval = rescan_interval
        self.polls = Polls()
        self.durations = Durations()
        self._graph_drops = 0  # graph events lost, as last read out (read_out)
        self._graph_drops_seen = 0  # ... as the last graph record read said (or more)
        self._stop = stop
        self._thread: threading.Thread | None = None

    @property
    def _bpf(self) -> Any:
        return self.program.bpf

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ebpf-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """The loop stopped (and joined, unless called from it)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(30)  # a poll is 0.1 s; an attach stops at the next probe

    def rescan(self) -> None:
        """Every process: probe new files, detach the files nobody maps any more."""
        if self._bpf is not None and self._thread is threading.current_thread():
            self._bpf.ring_buffer_consume()
        self.scans.rescan()

    def _run(self) -> None:
        next_scan = time.monotonic() + self.rescan_interval
        while not self._stop.is_set():
            try:
                self.pump(min(_POLL_MS, max(0, int((next_scan - time.monotonic()) * 1000))))
                if time.monotonic() >= next_scan:
                    self.rescan()
                    next_scan = time.monotonic() + self.rescan_interval
            except Exception:
                log.exception("eBPF event loop")
                self._stop.wait(1)

    def pump(self, wait_ms: int) -> None:
        """One turn of the event loop: reads the events written so far, waiting up to
        `wait_ms` for one, then probes what the processes they name mapped. The ring
        buffers are read until empty, so a turn begun after an event was written returns
        having read it, or counted it lost."""
        self.polls.begun += 1
        begun = self.polls.begun
        self._bpf.ring_buffer_poll(wait_ms)
        self.read_out()
        self.polls.done = begun
        self.scans.scan_asked()

    def on_event(self, _ctx: Any, data: Any, size: int) -> int:
        try:
            raw = ctypes.string_at(data, size)
            # Every record starts as a graph record's does (struct ehead).
            etype, tgid, _, _, lost, _, _ = abi.GRAPH_EVENT.unpack_from(raw)
            self.scans.sight(tgid)
            if etype == abi.EV_DURATIONS:
                self.durations.on_event(raw)
            elif etype == abi.EV_WAIT:
                self.durations.on_wait(raw)
            elif etype == abi.EV_ELAPSED:
                self.durations.on_elapsed(raw)
            elif etype in abi.GRAPH_EVENTS:
                if lost != self._graph_drops_seen & 0xFFFFFFFF:
                    self._graph_events_lost_before(lost)
                node = self.graphs.on_event(raw)
                if node is not None:  # named after the names read before it
                    self.resolver.want_name(*node)
            else:
                self.resolver.on_event(raw)
        except Exception:
            log.exception("eBPF event")
        return 0

    def _graph_events_lost_before(self, lost: int) -> None:
        """A graph record saying how many graph records were lost before it (low 32
        bits): if more than known, what was being built is not known whole, from this
        record on (see Graphs.building_lost). Which executable graphs' records were lost
        is known only once every record written before the loss was counted has been
        read (read_out)."""
        more = (lost - self._graph_drops_seen) & 0xFFFFFFFF
        if 0 < more < 1 << 31:  # (above: a record written before one already read)
            self._graph_drops_seen += more
            self.graphs.building_lost()

    def read_out(self) -> None:
        """After a poll: the graph events lost so far and the last serial given, then
        every record written before them read; only then, if graph events were lost,
        executable graphs given a serial up to it whose record was not read are unknown
        (Graphs.serials_lost), and what was being built too unless a record read since
        said so (none came after the loss). A poll may return before reading a record
        written before it (a signal interrupts its wait: a stopped and continued
        exporter): judged by a loss counted before it was read, every graph read after
        would be unknown."""
        drops = self._bpf["drops"]
        lost = scalar(drops[drops.Key(abi.DROP_GRAPH_EVENTS_FULL)])
        state = self._bpf["graph_state"]
        serial = scalar(state[state.Key(2)])
        self._bpf.ring_buffer_consume()
        if lost > self._graph_drops:
            self._graph_drops = lost
            if lost > self._graph_drops_seen:
                self._graph_drops_seen = lost
                self.graphs.building_lost()
            self.graphs.serials_lost(serial)

    def on_proc_event(self, _ctx: Any, data: Any, size: int) -> int:
        _, tgid = abi.PROC_EVENT.unpack(ctypes.string_at(data, abi.PROC_EVENT.size))
        self.scans.ask(tgid)
        return 0
