"""Which CUDA libraries are mapped, by whom, and where: /proc/<pid>/maps.

A library is identified by its file (device, inode), not its path: the same file seen
by many processes, or under other paths inside containers, is probed once. It is opened
through /proc/<pid>/map_files/<range> (or /proc/<pid>/root/<path>), which reaches a
container's copy from the host.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gpu_exporter.model.ebpf_abi import MARKER_SYMBOLS
from gpu_exporter.readers import files
from gpu_exporter.sources.ebpf.elf import ElfError, ElfFile

# ~100 bytes a mapping: 160,000 mappings, far past any CUDA process's (a few thousand).
MAPS_MAX_BYTES = 16 * 1024 * 1024

FileId = tuple[str, int]  # (device "maj:min" as in maps, inode)

# libamdhip64.so.5/.6/.7: AMD's HIP runtime (issue #23).
_NAMED = re.compile(r"^lib(cudart|cuda|amdhip64)([-.][^/]*)?\.so(\.[0-9.]+)?$")


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    offset: int
    file: FileId
    path: str  # as the process sees it
    executable: bool


def parse_maps(text: str) -> list[Mapping]:
    out = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        rng, perms, offset, dev, inode, path = parts
        if inode == "0":
            continue
        lo, _, hi = rng.partition("-")
        out.append(Mapping(int(lo, 16), int(hi, 16), int(offset, 16), (dev, int(inode)),
                           path.removesuffix(" (deleted)"), "x" in perms))
    return out


def read_maps(procfs: str, pid: int) -> list[Mapping]:
    try:
        return parse_maps(files.read_text(f"{procfs}/{pid}/maps", MAPS_MAX_BYTES))
    except OSError:
        return []


def pids(procfs: str) -> Iterator[int]:
    try:
        names = os.listdir(procfs)
    except OSError:
        return
    for name in names:
        if name.isdigit():
            yield int(name)


def same_file(path: str, file: FileId) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}", st.st_ino) == file


def open_path(procfs: str, pid: int, m: Mapping) -> str:
    """A path that opens this mapping's file from here, even inside a container; once
    the process is gone, the path it saw if that is still the same file."""
    via_map_files = f"{procfs}/{pid}/map_files/{m.start:x}-{m.end:x}"
    if os.path.exists(via_map_files):
        return via_map_files
    via_root = f"{procfs}/{pid}/root{m.path}"
    if os.path.exists(via_root) or not same_file(m.path, m.file):
        return via_root
    return m.path


@dataclass(frozen=True)
class Candidate:
    file: FileId
    pid: int
    path: str  # as the process sees it
    open_path: str


@dataclass
class ScanResult:
    cuda_files: dict[FileId, Candidate]  # CUDA files mapped now, one mapper of each
    cuda_maps: dict[int, list[Mapping]]  # the maps of each process that maps one


class Scanner:
    """Finds CUDA library files mapped by processes: all of them (a rescan) or one
    process (it exec'd or mapped a file). Remembers which files it has judged (by device
    and inode), so a rescan only reads the maps."""

    def __init__(self, procfs: str) -> None:
        self.procfs = procfs
        self._judged: dict[FileId, bool] = {}
        self._self_pid = os.getpid()

    def scan(self, between: Callable[[], None] | None = None) -> ScanResult:
        """Every process. `between` is called after each process (urgent work that
        should not wait for the whole scan)."""
        out = ScanResult({}, {})
        for pid in pids(self.procfs):
            if pid != self._self_pid:
                self._scan_into(pid, out)
            if between is not None:
                between()
        return out

    def scan_pid(self, pid: int) -> ScanResult:
        out = ScanResult({}, {})
        if pid != self._self_pid:
            self._scan_into(pid, out)
        return out

    def _scan_into(self, pid: int, out: ScanResult) -> None:
        maps = read_maps(self.procfs, pid)
        for m in maps:
            if not m.executable:
                continue
            verdict = self._judged.get(m.file)
            if verdict is None:
                verdict = self._judge(pid, m)
                if verdict is None:
                    continue  # could not open it now: judge it again next time
                self._judged[m.file] = verdict
            if verdict:
                out.cuda_maps[pid] = maps
                if m.file not in out.cuda_files:
                    out.cuda_files[m.file] = Candidate(m.file, pid, m.path,
                                                       open_path(self.procfs, pid, m))

    def _judge(self, pid: int, m: Mapping) -> bool | None:
        if _NAMED.match(os.path.basename(m.path)):
            return True
        path = open_path(self.procfs, pid, m)
        try:
            elf = ElfFile.open(path)
        except ElfError:
            return None if not os.path.exists(path) else False
        # Defined, not only imported: a program linked against libcudart names
        # cudaLaunchKernel too; a runtime linked in statically defines it.
        return bool(elf.functions(MARKER_SYMBOLS))
