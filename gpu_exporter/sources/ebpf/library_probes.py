"""Probes on CUDA library files: attached to each file a process maps (once, however many
processes map it), a file that cannot be probed not tried again, and detached, in the
background, from the files no process maps any more.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.sources.ebpf import uprobes
from gpu_exporter.sources.ebpf.elf import ElfError, ElfFile
from gpu_exporter.sources.ebpf.libraries import Candidate, FileId
from gpu_exporter.sources.ebpf.loader import Program

log = logging.getLogger("gpu_exporter.ebpf")

# A file no process maps any more is detached when this many rescans in a row have not
# found it: within two rescans of its last process exiting.
DETACH_AFTER_MISSES = 2


@dataclass
class _File:
    """A library file with probes."""

    file: FileId
    path: str  # as the first process seen mapping it saw it
    attachment: uprobes.Attachment
    misses: int = 0  # rescans in a row that found no process mapping it


class Attacher:
    """The files with probes. `stop`: set when the engine closes (no new attach)."""

    def __init__(self, program: Program, stop: threading.Event) -> None:
        self.program = program
        self._stop = stop
        self._files: dict[FileId, _File] = {}
        self._failed: set[FileId] = set()
        self._files_lock = threading.Lock()
        self._detaching: dict[FileId, Future[None]] = {}
        self._detacher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ebpf-detach")

    def shutdown(self) -> None:
        """Waits for the detaching under way; nothing is detached in the background after."""
        self._detacher.shutdown(wait=True)

    def take_all(self) -> list[_File]:
        """Every file with probes, no longer kept (their probes are the caller's to
        detach)."""
        with self._files_lock:
            files, self._files = list(self._files.values()), {}
        return files

    def attach_new(self, cands: Iterable[Candidate]) -> None:
        for cand in cands:
            with self._files_lock:
                known = self._files.get(cand.file)
                if known is not None:
                    known.misses = 0
                    continue
                leaving = self._detaching.get(cand.file)
            if cand.file in self._failed or self._stop.is_set():
                continue
            if leaving is not None:
                leaving.result()  # mapped again while its old probes go: never both at once
            self._attach(cand)

    def _attach(self, cand: Candidate) -> None:
        mech = self.program.mech
        assert mech is not None
        try:
            elf = ElfFile.open(cand.open_path)
            points = []
            for probe_symbol, address in elf.functions(p.symbol for p in abi.ALL_PROBES).items():
                probe = abi.BY_SYMBOL[probe_symbol]
                offset = elf.offset_of_vaddr(address)
                if offset is None:
                    continue
                cookie = abi.cookie(abi.INDEX[probe_symbol])
                points.append(uprobes.Point(offset, probe.program, False, cookie))
                points.append(uprobes.Point(offset, abi.return_program(probe), True, cookie))
        except ElfError as exc:
            self._attach_failed(cand, "cannot read symbols of", exc)
            return
        if not points:
            self._failed.add(cand.file)
            return
        try:
            attachment = mech.attach(cand.open_path, points)
        except uprobes.AttachError as exc:
            self._attach_failed(cand, "cannot attach probes to", exc)
            return
        with self._files_lock:
            self._files[cand.file] = _File(cand.file, cand.path, attachment)
        log.info("attached %d probes to %s (pid %d)", attachment.probes, cand.path, cand.pid)

    def _attach_failed(self, cand: Candidate, what: str, exc: Exception) -> None:
        """A file that cannot be probed is not tried again (said once). But when the path
        it was opened by is gone (the process whose /proc/<pid>/map_files link it was
        exited meanwhile: a short-lived program), the next scan tries again through
        another process that maps it."""
        if not os.path.exists(cand.open_path):
            log.debug("%s %s: pid %d exited meanwhile (%s); tried again at the next scan",
                      what, cand.path, cand.pid, exc)
            return
        log.warning("%s %s (pid %d): %s", what, cand.path, cand.pid, exc)
        self._failed.add(cand.file)

    def detach_unmapped(self, mapped: set[FileId]) -> None:
        gone: list[_File] = []
        with self._files_lock:
            for file_id, f in list(self._files.items()):
                if file_id in mapped:
                    f.misses = 0
                    continue
                f.misses += 1
                if f.misses >= DETACH_AFTER_MISSES:
                    gone.append(self._files.pop(file_id))
            if not gone:
                return
            job = self._detacher.submit(self._detach, gone)
            for file_id in {f.file for f in gone}:
                self._detaching[file_id] = job

    def _detach(self, gone: list[_File]) -> None:
        """In the background: closing links waits for the kernel (tens of ms), and new
        processes should not wait for that to be probed."""
        mech = self.program.mech
        assert mech is not None
        try:
            mech.detach(f.attachment for f in gone)
            for f in gone:
                log.info("detached %d probes from %s (no process maps it)",
                         f.attachment.probes, f.path)
        except Exception:
            log.exception("detaching eBPF probes")
        finally:
            with self._files_lock:
                for f in gone:
                    self._detaching.pop(f.file, None)

    @property
    def attached_libraries(self) -> list[str]:
        with self._files_lock:
            return sorted({f.path for f in self._files.values()})
