"""The eBPF engine: loads the BPF program, attaches it to every CUDA library file that
any process maps, keeps doing so on an interval, and reads the aggregated maps back at
scrape. A façade over its parts, each a module of its own:

- loader.Program: the BPF program compiled, loaded and its tracepoints attached;
- library_probes.Attacher: the library files with probes, attached and detached;
- rescans.Scans: which processes map which CUDA files (asked, sighted, rescanned);
- events.EventLoop: the thread reading the ring buffers and rescanning;
- counters.Counters: what a BPF counter is reported as (labels, graphs, devices);
- maps.MapReader: the maps read into the typed reading, the exited folded (HoldBack).

bcc is imported by the caller, lazily: it costs about 70 MB (LLVM) and is needed only
when the collector is enabled.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from gpu_exporter.sources.ebpf.counters import Counters
from gpu_exporter.sources.ebpf.events import EventLoop
from gpu_exporter.sources.ebpf.graphs import Graphs
from gpu_exporter.sources.ebpf.libraries import Scanner
from gpu_exporter.sources.ebpf.library_probes import Attacher
from gpu_exporter.sources.ebpf.loader import Program
from gpu_exporter.sources.ebpf.maps import MapReader
from gpu_exporter.sources.ebpf.names import (
    EXECUTABLES_MAX,
    EXPIRY_SECONDS,
    ExecutableCap,
    NameCap,
)
from gpu_exporter.sources.ebpf.reading import CudaActivity, NvmlView
from gpu_exporter.sources.ebpf.rescans import Scans
from gpu_exporter.sources.ebpf.resolve import Resolver

log = logging.getLogger("gpu_exporter.ebpf")


class Engine:
    """The parts wired together. One stop event is shared: once the engine closes, no
    file is attached any more and the event loop ends. Reads hold the reader's lock (one
    at a time), the files with probes the attacher's, graphs their own."""

    def __init__(self, procfs: str, names_max: int, pid_label: bool,
                 rescan_interval: float, mechanism: str = "auto",
                 executables_max: int = EXECUTABLES_MAX,
                 expiry_seconds: float = EXPIRY_SECONDS) -> None:
        self.resolver = Resolver(procfs, NameCap(names_max), ExecutableCap(executables_max))
        self.scanner = Scanner(procfs)
        self.graphs = Graphs()
        self.program = Program(mechanism)
        stop = threading.Event()  # the engine closes: no new attach, the loop ends
        self.attacher = Attacher(self.program, stop)
        self.scans = Scans(procfs, self.program, self.scanner, self.resolver, self.attacher,
                           stop)
        self.events = EventLoop(self.program, self.scans, self.graphs, self.resolver, stop,
                                rescan_interval)
        self.counters = Counters(self.resolver, self.graphs, pid_label)
        self.maps = MapReader(self.program, procfs, self.counters, self.graphs, self.resolver,
                              self.events.polls, lambda: self.attached_libraries,
                              expiry_seconds)
        self.maps.durations = self.events.durations

    @property
    def mechanism(self) -> str:
        return self.program.mechanism

    @property
    def wanted_mechanism(self) -> str:
        return self.program.wanted_mechanism

    @property
    def mechanism_problem(self) -> str | None:
        """Why uprobe_multi is not used."""
        return self.program.mechanism_problem

    @property
    def tracking_problem(self) -> str | None:
        """Why exec/mmap tracking is off."""
        return self.program.tracking_problem

    @property
    def attached_libraries(self) -> list[str]:
        return self.attacher.attached_libraries

    def start(self, bcc: Any) -> None:
        self.program.load(bcc)
        try:
            name = self.program.open(bcc, self.events.on_event, self.events.on_proc_event)
        except BaseException:
            self.close()
            raise
        log.info("eBPF probes attach through %s%s", name,
                 f" ({self.mechanism_problem})" if self.mechanism_problem else "")
        self.rescan()
        self.events.start()

    def close(self) -> None:
        self.events.stop()
        self.attacher.shutdown()
        if self.program.bpf is None:
            return
        started = time.monotonic()
        files = self.attacher.take_all()
        probes = sum(f.attachment.probes for f in files)
        try:
            self.program.unload(f.attachment for f in files)
            log.info("detached %d eBPF probes from %d files in %.1f s", probes, len(files),
                     time.monotonic() - started)
        except Exception:
            log.exception("detaching eBPF probes")
        self.program.bpf = None

    def rescan(self) -> None:
        """Every process: probe new files, detach the files nobody maps any more."""
        self.events.rescan()

    def pump(self, wait_ms: int) -> None:
        """One turn of the event loop (EventLoop.pump)."""
        self.events.pump(wait_ms)

    def read(self, nvml: NvmlView | None = None) -> CudaActivity:
        """Everything counted so far. `nvml`: NVML's processes this scrape, which the
        device of each call is judged by (none: no device labels this scrape)."""
        return self.maps.read(nvml)
