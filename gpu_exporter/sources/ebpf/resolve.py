"""Names for what the probes saw: the executable of a process, and the kernel behind a
launch (a host stub address resolved through the ELF symbols of the mapping that holds
it, a driver handle through the name it was looked up by)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Final

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.readers.sysfs.pci import normalize_pci_address
from gpu_exporter.sources.ebpf.elf import ElfError, ElfFile, ElfSymbols
from gpu_exporter.sources.ebpf.libraries import FileId, Mapping, open_path, read_maps
from gpu_exporter.sources.ebpf.names import UNKNOWN, ExecutableCap, NameCap, kernel_name

Handle = tuple[int, int]  # (tgid, handle value)


def uuid_text(raw: bytes) -> str:
    """A CUDA UUID (CUuuid, cudaUUID_t: 16 bytes) as NVML writes it after `GPU-`/`MIG-`."""
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
_ALIAS_DEPTH: Final = 4


class Resolver:
    def __init__(self, procfs: str, cap: NameCap,
                 executables: ExecutableCap | None = None) -> None:
        self.procfs = procfs
        self.cap = cap
        self.executables = executables if executables is not None else ExecutableCap(1 << 62)
        self._lock = threading.RLock()
        # The files processes map, by identity, opened while a process mapped them: a
        # kernel is named from its file even after the process has exited.
        self._files: dict[FileId, ElfFile | None] = {}
        # The last maps seen of each process that maps a CUDA library.
        self._maps: dict[int, list[Mapping]] = {}
        self._dead: set[int] = set()  # processes found gone by one rescan
        self._exe: dict[int, str] = {}  # process -> its label (capped: see executables)
        self._exe_names: dict[int, str] = {}  # process -> its executable's own name
        self._handle_names: dict[Handle, str] = {}
        self._aliases: dict[Handle, int] = {}  # CUfunction -> the CUkernel it came from
        self._kernel_host: dict[Handle, int] = {}  # cudaKernel_t -> its host stub
        self._labels: dict[tuple[int, int, int], str] = {}
        self._unnamed: list[tuple[int, int, int]] = []  # launch keys to name
        # What a process was told of its device ordinals (a UUID, a PCI address).
        self._device_ids: dict[tuple[int, int], str] = {}

    # -- what the scans saw -------------------------------------------------------------
    def remember(self, pid: int, maps: list[Mapping]) -> None:
        """A CUDA process's maps: its executable files are opened now, while they can be."""
        with self._lock:
            self._maps[pid] = maps
            self._dead.discard(pid)
            for m in maps:
                if m.executable and m.file not in self._files:
                    self._files[m.file] = self._open(pid, m)

    def prune(self, alive: Callable[[int], bool]) -> None:
        """After a rescan: forget the maps of processes gone since the previous one (their
        launches have long been named), then the files no process still maps."""
        with self._lock:
            for pid in list(self._maps):
                if alive(pid):
                    self._dead.discard(pid)
                elif pid in self._dead:
                    del self._maps[pid]
                    self._dead.discard(pid)
                else:
                    self._dead.add(pid)
            used = {m.file for maps in self._maps.values() for m in maps}
            for file in [f for f in self._files if f not in used]:
                del self._files[file]

    def _open(self, pid: int, m: Mapping) -> ElfFile | None:
        try:
            return ElfFile.open(open_path(self.procfs, pid, m))
        except ElfError:
            return None

    # -- ring buffer events (the poll thread) -----------------------------------------
    def on_event(self, data: bytes) -> None:
        etype, tgid, fam, sub, _, ident, target, comm = abi.EVENT_HEAD.unpack_from(data)
        with self._lock:
            if etype == abi.EV_NEW_KEY:
                self.executable(tgid, comm.split(b"\0", 1)[0].decode("utf-8", "replace"))
                if fam == abi.FAM_LAUNCH:
                    # Named after the scans this event may have asked for (a process
                    # that exec'd or mapped a library) have seen its maps.
                    self._unnamed.append((tgid, sub, ident))
            elif etype == abi.EV_HANDLE_NAME:
                raw = data[abi.EVENT_HEAD.size:abi.EVENT_HEAD.size + abi.NAME_LEN]
                name = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
                if name:
                    self._handle_names[(tgid, ident)] = name
            elif etype == abi.EV_HANDLE_ALIAS:
                self._aliases[(tgid, ident)] = target
            elif etype == abi.EV_KERNEL_HOST:
                self._kernel_host[(tgid, ident)] = target
            elif etype == abi.EV_DEVICE_UUID:
                raw = data[abi.EVENT_HEAD.size:abi.EVENT_HEAD.size + 16]
                self._device_ids[(tgid, ident)] = uuid_text(raw)
            elif etype == abi.EV_HIP_DEVICE_PCI:  # HIP's properties: the PCI fields
                self._device_ids[(tgid, ident)] = (
                    f"{target >> 32:04x}:{target >> 8 & 0xFF:02x}:{target & 0x1F:02x}.0")
            elif etype == abi.EV_DEVICE_PCI:
                raw = data[abi.EVENT_HEAD.size:abi.EVENT_HEAD.size + abi.NAME_LEN]
                address = normalize_pci_address(raw.split(b"\0", 1)[0].decode("ascii", "replace"))
                if address:
                    self._device_ids[(tgid, ident)] = address

    def device_id(self, tgid: int, ordinal: int) -> str | None:
        """What process `tgid` was told its device `ordinal` is: the hex of its UUID
        (8-4-4-4-12) or its PCI address."""
        with self._lock:
            return self._device_ids.get((tgid, ordinal))

    def want_name(self, tgid: int, api: int, ident: int) -> None:
        """A kernel to name while its process lives (a graph's kernel node)."""
        with self._lock:
            self._unnamed.append((tgid, api, ident))

    def name_new_keys(self) -> None:
        with self._lock:
            for tgid, api, ident in self._unnamed:
                self.kernel_label(tgid, api, ident)
            self._unnamed.clear()

    # -- names --------------------------------------------------------------------------
    def knows_executable(self, tgid: int) -> bool:
        """Whether the executable name of `tgid` is fixed (read from /proc while it lived,
        or from the command an event of it carried)."""
        with self._lock:
            return tgid in self._exe

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
            label = self._exe[tgid] = self.executables.acquire(name)
            self._exe_names[tgid] = name
            return label

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
        if api in abi.GRAPH_APIS:
            return UNKNOWN
        if api == abi.API_HIP:
            return self._hip_kernel(tgid, ident)
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

    def _hip_kernel(self, tgid: int, handle: int) -> str:
        """A HIP launch's kernel: the device name its handle was registered with
        (__hipRegisterFunction), else the ELF symbol of the handle (a variable named
        after the kernel) or of a host function given in its place. A registered name
        that filled the event's buffer was cut short: the symbol is asked first."""
        registered = self._handle_names.get((tgid, handle))
        if registered is not None and len(registered.encode()) < abi.NAME_LEN - 1:
            return kernel_name(registered)
        symbol = self.symbol_at(tgid, handle) or self.symbol_at(tgid, handle, objects=True)
        if symbol is not None:
            return kernel_name(symbol)
        return UNKNOWN

    def symbol_at(self, tgid: int, address: int, objects: bool = False) -> str | None:
        """The function (`objects`: the variable) of the process's maps at `address`."""
        mapping = self._mapping(tgid, address)
        if mapping is None:
            return None
        elf = self._elf_of(tgid, mapping, objects)
        if elf is None:
            return None
        vaddr = elf.vaddr_of_offset(address - mapping.start + mapping.offset)
        return None if vaddr is None else elf.function_at(vaddr)

    def _mapping(self, tgid: int, address: int) -> Mapping | None:
        for fresh in (False, True):
            if fresh:
                maps = read_maps(self.procfs, tgid)
                if not maps:
                    break
                self.remember(tgid, maps)
            for m in self._maps.get(tgid, ()):
                if m.start <= address < m.end:
                    return m
        return None

    def _elf_of(self, tgid: int, m: Mapping, objects: bool = False) -> ElfSymbols | None:
        if m.file not in self._files:
            self._files[m.file] = self._open(tgid, m)
        elf = self._files[m.file]
        if elf is None:
            return None
        try:
            return elf.objects() if objects else elf.symbols()
        except ElfError:
            self._files[m.file] = None
            return None

    def forget(self, tgid: int) -> None:
        """A process is gone and its counts are folded: drop what was kept for it."""
        with self._lock:
            self._maps.pop(tgid, None)
            self._dead.discard(tgid)
            label = self._exe.pop(tgid, None)
            if label is not None:
                self.executables.release(self._exe_names.pop(tgid), label)
            for d in (self._handle_names, self._aliases, self._kernel_host, self._device_ids):
                for k in [k for k in d if k[0] == tgid]:
                    del d[k]
            for label_key in [k for k in self._labels if k[0] == tgid]:
                del self._labels[label_key]
