"""A small ELF64 reader: function symbols (.symtab and .dynsym) and load segments.

Enough to find where a CUDA entry point lives in a library (to attach a probe) and which
function holds a code address (to name a kernel from its host stub). Read once per file
(device, inode) and cached by the caller. Libraries with hundreds of thousands of
symbols (libtorch_cuda.so) are kept compact: addresses in arrays, names read from the
memory-mapped file only when one is asked for.
"""

from __future__ import annotations

import mmap
import struct
from array import array
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_PHDR = struct.Struct("<IIQQQQQQ")
_SYM = struct.Struct("<IBBHQQ")
SHT_SYMTAB, SHT_DYNSYM = 2, 11
PT_LOAD = 1
STT_FUNC, STT_GNU_IFUNC = 2, 10
SHN_UNDEF = 0
_NAME_MAX = 1 << 16


class ElfError(Exception):
    pass


@dataclass(frozen=True)
class Segment:
    offset: int  # in the file
    vaddr: int
    filesz: int


class ElfSymbols:
    def __init__(self, m: mmap.mmap, functions: dict[str, int], segments: tuple[Segment, ...],
                 starts: array[int], ends: array[int], names: array[int]) -> None:
        self._m = m  # kept open: names are read from it on demand, even after the
        # process whose /proc/<pid>/map_files path opened it has exited
        self.functions = functions  # name -> st_value, for the names asked for
        self.segments = segments
        self._starts, self._ends, self._names = starts, ends, names

    def __len__(self) -> int:
        return len(self._starts)

    def vaddr_of_offset(self, file_offset: int) -> int | None:
        for s in self.segments:
            if s.offset <= file_offset < s.offset + s.filesz:
                return file_offset - s.offset + s.vaddr
        return None

    def function_at(self, vaddr: int) -> str | None:
        """The function whose body holds vaddr (or starts exactly there)."""
        i = bisect_right(self._starts, vaddr) - 1
        if i < 0:
            return None
        start = self._starts[i]
        while i >= 0 and self._starts[i] == start:
            if vaddr < self._ends[i] or vaddr == start:
                return self._name(self._names[i])
            i -= 1
        return None

    def _name(self, offset: int) -> str:
        end = self._m.find(b"\0", offset, offset + _NAME_MAX)
        return self._m[offset:end if end >= 0 else offset + _NAME_MAX].decode(
            "utf-8", "replace")


def read_symbols(path: str, wanted: Iterable[str] | None = None) -> ElfSymbols:
    """Function symbols of an ELF64 little-endian file; ElfError if it is not one.
    `functions` holds the names in `wanted` (every name when None)."""
    try:
        with open(path, "rb") as f:
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:
        raise ElfError(f"{path}: {exc}") from exc
    try:
        return _parse(m, None if wanted is None else {w.encode() for w in wanted})
    except (ValueError, IndexError, struct.error) as exc:
        m.close()
        raise ElfError(f"{path}: {exc}") from exc
    except ElfError:
        m.close()
        raise


def _parse(m: mmap.mmap, wanted: set[bytes] | None) -> ElfSymbols:
    if len(m) < _EHDR.size or m[:4] != b"\x7fELF":
        raise ElfError("not an ELF file")
    if m[4] != 2 or m[5] != 1:
        raise ElfError("not a 64-bit little-endian ELF file")
    (_, _, _, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum,
     _) = _EHDR.unpack_from(m, 0)
    segments = []
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = _PHDR.unpack_from(
            m, phoff + i * phentsize)
        if p_type == PT_LOAD:
            segments.append(Segment(p_offset, p_vaddr, p_filesz))
    sections = [_SHDR.unpack_from(m, shoff + i * shentsize) for i in range(shnum)]
    functions: dict[str, int] = {}
    starts, ends, names = array("Q"), array("Q"), array("Q")
    for sh in sections:
        sh_type, sh_offset, sh_size, sh_link, sh_entsize = sh[1], sh[4], sh[5], sh[6], sh[9]
        if sh_type not in (SHT_SYMTAB, SHT_DYNSYM) or sh_link >= len(sections):
            continue
        str_off, str_size = sections[sh_link][4], sections[sh_link][5]
        entsize = sh_entsize or _SYM.size
        for off in range(sh_offset, sh_offset + sh_size - entsize + 1, entsize):
            st_name, st_info, _, st_shndx, st_value, st_size = _SYM.unpack_from(m, off)
            if st_info & 0xF not in (STT_FUNC, STT_GNU_IFUNC) or st_shndx == SHN_UNDEF:
                continue
            if st_value == 0 or st_name >= str_size:
                continue
            name_at = str_off + st_name
            starts.append(st_value)
            ends.append(st_value + st_size)
            names.append(name_at)
            if wanted is None or wanted:
                end = m.find(b"\0", name_at, str_off + str_size)
                raw = m[name_at:end if end >= 0 else str_off + str_size]
                if wanted is None or raw in wanted:
                    functions.setdefault(raw.decode("utf-8", "replace"), st_value)
    order = sorted(range(len(starts)), key=starts.__getitem__)
    return ElfSymbols(
        m, functions, tuple(segments), array("Q", (starts[i] for i in order)),
        array("Q", (ends[i] for i in order)), array("Q", (names[i] for i in order)),
    )


def defines_any(path: str, names: frozenset[str]) -> bool:
    """Cheap test: does the file's string data hold one of these symbol names at all?
    (A prefilter before a full read_symbols of a big binary.)"""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            if m[:4] != b"\x7fELF":
                return False
            return any(m.find(b"\0" + n.encode() + b"\0") >= 0 for n in names)
    except (OSError, ValueError):
        return False
