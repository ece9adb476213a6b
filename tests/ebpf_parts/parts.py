"""The engine's map reading built alone, over the maps of bpf_maps and a /proc tree the
test lays out: what the probes counted and told, without bcc, root or a probe."""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.sources.ebpf.counters import Counters
from gpu_exporter.sources.ebpf.events import Polls
from gpu_exporter.sources.ebpf.graphs import Graphs
from gpu_exporter.sources.ebpf.loader import Program
from gpu_exporter.sources.ebpf.maps import MapReader
from gpu_exporter.sources.ebpf.names import EXPIRY_SECONDS, ExecutableCap, NameCap
from gpu_exporter.sources.ebpf.resolve import Resolver
from tests.ebpf_parts import bpf_maps

LIBRARY = "/opt/cuda/lib/libcuda.so.1"


@dataclass
class Parts:
    procfs: Path
    maps: dict[str, Any]
    resolver: Resolver
    graphs: Graphs
    counters: Counters
    polls: Polls
    reader: MapReader

    def process(self, tgid: int, exe: str) -> None:
        os.makedirs(self.procfs / str(tgid))
        os.symlink(f"/opt/app/bin/{exe}", self.procfs / str(tgid) / "exe")

    def exit(self, tgid: int) -> None:
        (self.procfs / str(tgid) / "exe").unlink()
        (self.procfs / str(tgid)).rmdir()

    def name(self, tgid: int, handle: int, mangled: str) -> None:
        """A driver kernel's name, as the ring buffer tells it (EV_HANDLE_NAME)."""
        self.resolver.on_event(abi.EVENT_HEAD.pack(abi.EV_HANDLE_NAME, tgid, 0, 0, 0, handle,
                                                   0, b"") + mangled.encode().ljust(
                                                       abi.NAME_LEN, b"\0"))

    def graph(self, tgid: int, serial: int, nodes: list[tuple[int, int]]) -> None:
        """A graph built of `nodes` and instantiated as executable graph `serial`, as the
        graph records tell it."""
        handle = 0x55

        def record(etype: int, api: int, ident: int, target: int) -> None:
            self.graphs.on_event(abi.GRAPH_EVENT.pack(etype, tgid, api, 0, 0, ident, target))

        record(abi.EV_GRAPH_CREATE, 0, handle, 0)
        for api, kernel in nodes:
            record(abi.EV_GRAPH_NODE, api, kernel, handle)
        record(abi.EV_GRAPH_EXEC, 0, serial, handle)

    def count(self, tgid: int, fam: int, sub: int, ident: int, n: int, slot: int = 0,
              dev: int = abi.DEV_NONE) -> None:
        """A counter of `stats` at `n` (struct skey)."""
        stats = self.maps["stats"]
        stats[bpf_maps.SKey(tgid, fam, sub, ident, slot, dev)] = ctypes.c_uint64(n)

    def shape(self, tgid: int, slot: int, grid_slot: int, n: int,
              launches: list[tuple[int, int, int]]) -> None:
        """The process's shape value in `slot` of `shapes`: `n` launches of 2^grid_slot
        blocks; launch counters (api, kernel id, count)."""
        v = bpf_maps.Shape()
        v.tgid = tgid
        v.grid[grid_slot] = n
        v.grid_sum = n << grid_slot
        for i, (api, ident, count) in enumerate(launches):
            v.launches[i].tag = ident | api << 48
            v.launches[i].n = count
        self.maps["shapes"][ctypes.c_uint32(slot)] = v
        self.maps["proc_slots"][ctypes.c_uint32(tgid)] = ctypes.c_uint32(slot)


def parts(procfs: Path, pid_label: bool = True, executables: ExecutableCap | None = None,
          expiry_seconds: float = EXPIRY_SECONDS,
          clock: Callable[[], float] = time.monotonic) -> Parts:
    program = Program()
    program.bpf = bpf_maps.maps()
    resolver = Resolver(str(procfs), NameCap(100), executables)
    graphs = Graphs()
    counters = Counters(resolver, graphs, pid_label)
    polls = Polls()
    reader = MapReader(program, str(procfs), counters, graphs, resolver, polls,
                       lambda: [LIBRARY], expiry_seconds, clock)
    return Parts(procfs, program.bpf, resolver, graphs, counters, polls, reader)
