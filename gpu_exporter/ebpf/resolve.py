"""Names for what the probes saw: the executable of a process, and the kernel behind a
launch (a host stub address resolved through the ELF symbols of the mapping that holds
it, a driver handle through the name it was looked up by)."""

from __future__ import annotations

import os
import threading
from typing import Final

from gpu_exporter.ebpf import abi
from gpu_exporter.ebpf.discovery import FileId, Mapping, open_path, read_maps
from gpu_exporter.ebpf.elf import ElfError, ElfSymbols, read_symbols
from gpu_exporter.ebpf.names import UNKNOWN, NameCap, kernel_name

Handle = tuple[int, int]  # (tgid, handle value)
_ALIAS_DEPTH: Final = 4


class Resolver:
    def __init__(self, procfs: str, cap: NameCap,
                 known_maps: dict[int, list[Mapping]] | None = None) -> None:
        self.procfs = procfs
        self.cap = cap
        # Maps read by the library scan: used when the process has exited since.
        self.known_maps: dict[int, list[Mapping]] = known_maps or {}
        self._lock = threading.RLock()
        self._elf: dict[FileId, ElfSymbols | None] = {}
        self._maps: dict[int, list[Mapping]] = {}
        self._exe: dict[int, str] = {}
        self._handle_names: dict[Handle, str] = {}
        self._aliases: dict[Handle, int] = {}  # CUfunction -> the CUkernel it came from
        self._kernel_host: dict[Handle, int] = {}  # cudaKernel_t -> its host stub
        self._labels: dict[tuple[int, int, int], str] = {}

    # -- ring buffer events (the poll thread) -----------------------------------------
    def on_event(self, data: bytes) -> None:
        etype, tgid, fam, sub, _, ident, target, comm = abi.EVENT_HEAD.unpack_from(data)
        with self._lock:
            if etype == abi.EV_NEW_KEY:
                self.executable(tgid, comm.split(b"\0", 1)[0].decode("utf-8", "replace"))
                if fam == abi.FAM_LAUNCH:
                    self.kernel_label(tgid, sub, ident)
            elif etype == abi.EV_HANDLE_NAME:
                raw = data[abi.EVENT_HEAD.size:abi.EVENT_HEAD.size + abi.NAME_LEN]
                name = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
                if name:
                    self._handle_names[(tgid, ident)] = name
            elif etype == abi.EV_HANDLE_ALIAS:
                self._aliases[(tgid, ident)] = target
            elif etype == abi.EV_KERNEL_HOST:
                self._kernel_host[(tgid, ident)] = target

    # -- names --------------------------------------------------------------------------
    def executable(self, tgid: int, comm: str | None = None) -> str:
        with self._lock:
            name = self._exe.get(tgid)
            if name is not None:
                return name
            try:
                name = os.path.basename(os.readlink(f"{self.procfs}/{tgid}/exe"))
            except OSError:
                name = comm or ""
            name = name.removesuffix(" (deleted)") or UNKNOWN
            self._exe[tgid] = name
            return name

    def kernel_label(self, tgid: int, api: int, ident: int) -> str:
        """The cuda_kernel_name of a launch key: resolved once, capped, then fixed."""
        with self._lock:
            key = (tgid, api, ident)
            label = self._labels.get(key)
            if label is None:
                name = self._resolve(tgid, api, ident)
                label = UNKNOWN if name == UNKNOWN else self.cap.admit(name)
                self._labels[key] = label
            return label

    def _resolve(self, tgid: int, api: int, ident: int) -> str:
        if api == abi.API_GRAPH:
            return UNKNOWN
        if api == abi.API_RUNTIME:
            host = self._kernel_host.get((tgid, ident), ident)
            symbol = self.symbol_at(tgid, host)
            if symbol is not None:
                return kernel_name(symbol)
        handle = ident
        for _ in range(_ALIAS_DEPTH):
            name = self._handle_names.get((tgid, handle))
            if name is not None:
                return kernel_name(name)
            nxt = self._aliases.get((tgid, handle))
            if nxt is None:
                break
            handle = nxt
        return UNKNOWN

    def symbol_at(self, tgid: int, address: int) -> str | None:
        mapping = self._mapping(tgid, address)
        if mapping is None:
            return None
        elf = self._elf_of(tgid, mapping)
        if elf is None:
            return None
        vaddr = elf.vaddr_of_offset(address - mapping.start + mapping.offset)
        return None if vaddr is None else elf.function_at(vaddr)

    def _mapping(self, tgid: int, address: int) -> Mapping | None:
        for fresh in (False, True):
            if fresh or tgid not in self._maps:
                maps = read_maps(self.procfs, tgid) or self.known_maps.get(tgid, [])
                if not maps:
                    break
                self._maps[tgid] = maps
            for m in self._maps.get(tgid, ()):
                if m.start <= address < m.end:
                    return m
        return None

    def _elf_of(self, tgid: int, m: Mapping) -> ElfSymbols | None:
        if m.file not in self._elf:
            try:
                self._elf[m.file] = read_symbols(open_path(self.procfs, tgid, m), ())
            except ElfError:
                self._elf[m.file] = None
        return self._elf[m.file]

    def forget(self, tgid: int) -> None:
        """A process is gone and its counts are folded: drop what was kept for it."""
        with self._lock:
            self._maps.pop(tgid, None)
            self._exe.pop(tgid, None)
            for d in (self._handle_names, self._aliases, self._kernel_host):
                for k in [k for k in d if k[0] == tgid]:
                    del d[k]
            for label_key in [k for k in self._labels if k[0] == tgid]:
                del self._labels[label_key]
