"""Which CUDA library files the processes map: the processes the probes saw exec or map a
file (asked by the event loop), each process at its first event (sighted), and every
process at each rescan; the files found are probed, the files nobody maps any more
detached (Attacher), and the processes' maps remembered so their kernels can be named.
"""

from __future__ import annotations

import os
import threading

from gpu_exporter.sources.ebpf.libraries import Scanner
from gpu_exporter.sources.ebpf.library_probes import Attacher
from gpu_exporter.sources.ebpf.loader import Program
from gpu_exporter.sources.ebpf.resolve import Resolver


class Scans:
    def __init__(self, procfs: str, program: Program, scanner: Scanner, resolver: Resolver,
                 attacher: Attacher, stop: threading.Event) -> None:
        self.procfs = procfs
        self.program = program
        self.scanner = scanner
        self.resolver = resolver
        self.attacher = attacher
        self._stop = stop
        self._to_scan: set[int] = set()
        self._sighted: set[int] = set()  # processes whose maps were read at their first event

    def ask(self, tgid: int) -> None:
        """A process exec'd or mapped a file: scanned at the next scan_asked()."""
        self._to_scan.add(tgid)

    def sight(self, tgid: int) -> None:
        """A process's first event: its maps are read now, in the order of its events,
        while it most likely still runs, so that its kernels can be named after it exits.
        The scans the loop does between reads come too late for a short-lived process
        whose events keep coming: libbpf reads a ring buffer until no new record arrives,
        so a burst is read out (and named) only after it ends."""
        if tgid in self._sighted:
            return
        self._sighted.add(tgid)
        for pid, maps in self.scanner.scan_pid(tgid).cuda_maps.items():
            self.resolver.remember(pid, maps)

    def scan_asked(self) -> None:
        """The processes that exec'd or mapped a file since the last look: their new
        CUDA files are probed now; then the launches they made are named."""
        while self._to_scan and not self._stop.is_set():
            pid = self._to_scan.pop()
            found = self.scanner.scan_pid(pid)
            for p, maps in found.cuda_maps.items():
                self.resolver.remember(p, maps)
            self.attacher.attach_new(found.cuda_files.values())
        self.resolver.name_new_keys()

    def _between_pids(self) -> None:
        if self._to_scan and self.program.bpf is not None:
            self.scan_asked()

    def rescan(self) -> None:
        """Every process: probe new files, detach the files nobody maps any more."""
        found = self.scanner.scan(between=self._between_pids)
        for pid, maps in found.cuda_maps.items():
            self.resolver.remember(pid, maps)
        self.attacher.attach_new(found.cuda_files.values())
        self.attacher.detach_unmapped(set(found.cuda_files))
        self.resolver.prune(lambda pid: os.path.exists(f"{self.procfs}/{pid}"))
        self._sighted = {t for t in self._sighted if os.path.exists(f"{self.procfs}/{t}")}
        self.resolver.name_new_keys()
