"""A small ELF64 reader: function symbols (.symtab and .dynsym) and load segments.

Enough to find where a CUDA entry point lives in a library (to attach a probe) and which
function holds a code address (to name a kernel from its host stub). Read once per file
(device, inode) and cached by the caller. Libraries with hundreds of thousands of
symbols (libtorch_cuda.so) are kept compact: addresses in arrays, names read from the
memory-mapped file only when one is asked for; looking a few names up (is this a CUDA
runtime? where are its entry points?) reads only the string tables and one column of
the symbol tables.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gpu_exporter.readers import files

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_PHDR = struct.Struct("<IIQQQQQQ")
_SYM = struct.Struct("<IBBHQQ")
SHT_SYMTAB, SHT_DYNSYM = 2, 11
PT_LOAD = 1
STT_FUNC, STT_GNU_IFUNC = 2, 10
STT_OBJECT = 1
_FUNCTION_TYPES = (STT_FUNC, STT_GNU_IFUNC)
SHN_UNDEF = 0
_NAME_MAX = 1 << 16
# The work per file is capped: the eBPF collector runs as root and reads every library
# any process maps. Symbols of all tables together: libtorch_cuda.so and libcublasLt
# hold a few hundred thousand; 2 Mi (48 MiB of tables) are read in 1.1 s here, a
# file with more is refused (ElfError), not read in part.
MAX_SYMBOLS = 1 << 21
_U64 = (1 << 64) - 1
# Symbols at one address looked through for the one holding a code address: real
# libraries give a function a few aliases; a file giving it a million costs no more.
_ALIASES_MAX = 64


class ElfError(Exception):
    pass


@dataclass(frozen=True)
class Segment:
    offset: int  # in the file
    vaddr: int
    filesz: int


@dataclass(frozen=True)
class _SymbolTable:
    offset: int  # of the symbols in the file
    size: int
    entsize: int
    str_offset: int  # of its string table
    str_size: int


def vaddr_of_offset(segments: Iterable[Segment], file_offset: int) -> int | None:
    """Where a byte of the file is loaded (relative to the load base)."""
    for s in segments:
        if s.offset <= file_offset < s.offset + s.filesz:
            return file_offset - s.offset + s.vaddr
    return None


def open_file(path: str) -> mmap.mmap:
    """The file, mapped read-only. The mapping keeps the file readable after the
    path that opened it (a /proc/<pid>/map_files link) is gone."""
    try:
        # A regular file only, opened without waiting: the path is a process's (its
        # /proc/<pid>/map_files link, its root), and what a process names is not trusted.
        fd = files.open_regular(path)
        try:
            return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
    except (OSError, ValueError) as exc:
        raise ElfError(f"{path}: {exc}") from exc


class ElfFile:
    """Headers of one mapped ELF64 little-endian file; symbols on demand."""

    def __init__(self, m: mmap.mmap) -> None:
        self._m = m
        try:
            self.segments, self._tables = _headers(m)
        except (ValueError, IndexError, OverflowError, struct.error) as exc:
            raise ElfError(str(exc)) from exc
        self._symbols: ElfSymbols | None = None
        self._objects: ElfSymbols | None = None

    @classmethod
    def open(cls, path: str) -> ElfFile:
        m = open_file(path)
        try:
            return cls(m)
        except ElfError as exc:
            m.close()
            raise ElfError(f"{path}: {exc}") from exc

    def vaddr_of_offset(self, file_offset: int) -> int | None:
        return vaddr_of_offset(self.segments, file_offset)

    def offset_of_vaddr(self, vaddr: int) -> int | None:
        """The file offset a uprobe takes for a symbol's address."""
        for s in self.segments:
            if s.vaddr <= vaddr < s.vaddr + s.filesz:
                return vaddr - s.vaddr + s.offset
        return None

    def functions(self, names: Iterable[str]) -> dict[str, int]:
        """The functions among `names` that this file defines (not those it only
        imports), name -> address. Reads the string tables and the name column of the
        symbol tables only: fast on files with a million symbols."""
        wanted = {n.encode() for n in names}
        out: dict[str, int] = {}
        m = self._m
        for t in self._tables:
            at: dict[int, bytes] = {}  # string table offset -> name
            # A name may be the tail of a longer one (linkers merge string suffixes:
            # NVIDIA's libcudart.so.12/.13 keep `cudaLaunchKernel` only inside
            # `__cudaLaunchKernel`): every place the name ends a string is a candidate, and
            # a symbol is that name when its name starts exactly there.
            for name in wanted:
                needle = name + b"\0"
                pos = m.find(needle, t.str_offset, t.str_offset + t.str_size)
                while pos >= 0:
                    at[pos - t.str_offset] = name
                    pos = m.find(needle, pos + 1, t.str_offset + t.str_size)
            if not at or t.entsize != _SYM.size or t.size % _SYM.size:
                continue
            view = memoryview(m)[t.offset:t.offset + t.size]
            try:
                name_column = view.cast("I")[0::_SYM.size // 4].tolist()
            finally:
                view.release()
            for i, st_name in enumerate(name_column):
                if st_name not in at:
                    continue
                _, info, _, shndx, value, _ = _SYM.unpack_from(m, t.offset + i * _SYM.size)
                if shndx != SHN_UNDEF and value and info & 0xF in (STT_FUNC, STT_GNU_IFUNC):
                    out.setdefault(at[st_name].decode(), value)
        return out

    def symbols(self) -> ElfSymbols:
        """Every function symbol, for address lookups (parsed once)."""
        if self._symbols is None:
            try:
                self._symbols = _all_functions(self._m, self.segments, self._tables, False)
            except (ValueError, IndexError, OverflowError, struct.error) as exc:
                raise ElfError(str(exc)) from exc
        return self._symbols

    def objects(self) -> ElfSymbols:
        """Every data object symbol, for address lookups (parsed once, when first asked):
        a HIP kernel's handle is a variable named after the kernel, which
        hipLaunchKernel is given in place of a host function."""
        if self._objects is None:
            try:
                self._objects = _all_functions(self._m, self.segments, self._tables, False,
                                               (STT_OBJECT,))
            except (ValueError, IndexError, OverflowError, struct.error) as exc:
                raise ElfError(str(exc)) from exc
        return self._objects


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
        return vaddr_of_offset(self.segments, file_offset)

    def function_at(self, vaddr: int) -> str | None:
        """The function whose body holds vaddr (or starts exactly there)."""
        i = bisect_right(self._starts, vaddr) - 1
        if i < 0:
            return None
        start, stop = self._starts[i], max(-1, i - _ALIASES_MAX)
        while i > stop and self._starts[i] == start:
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
    elf = ElfFile.open(path)
    if wanted is None:
        try:
            return _all_functions(elf._m, elf.segments, elf._tables, True)
        except (ValueError, IndexError, OverflowError, struct.error) as exc:
            raise ElfError(f"{path}: {exc}") from exc
    syms = elf.symbols()
    syms.functions = elf.functions(wanted)
    return syms


def _headers(m: mmap.mmap) -> tuple[tuple[Segment, ...], tuple[_SymbolTable, ...]]:
    if len(m) < _EHDR.size or m[:4] != b"\x7fELF":
        raise ElfError("not an ELF file")
    if m[4] != 2 or m[5] != 1:
        raise ElfError("not a 64-bit little-endian ELF file")
    (_, _, _, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum,
     _) = _EHDR.unpack_from(m, 0)
    # Entries of another size than the ELF64 structs would be read overlapping (an
    # entsize of 1 read a 4 MiB table as 4 Mi symbols): refused, as readelf does.
    if phnum and phentsize != _PHDR.size:
        raise ElfError(f"program headers of {phentsize} bytes, not {_PHDR.size}")
    if shnum and shentsize != _SHDR.size:
        raise ElfError(f"section headers of {shentsize} bytes, not {_SHDR.size}")
    if phoff + phnum * phentsize > len(m) or shoff + shnum * shentsize > len(m):
        raise ElfError("headers beyond the end of the file")
    segments = []
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = _PHDR.unpack_from(
            m, phoff + i * phentsize)
        if p_type == PT_LOAD:
            segments.append(Segment(p_offset, p_vaddr, p_filesz))
    sections = [_SHDR.unpack_from(m, shoff + i * shentsize) for i in range(shnum)]
    tables: dict[tuple[int, int], _SymbolTable] = {}  # one table named twice is read once
    for sh in sections:
        sh_type, sh_offset, sh_size, sh_link, sh_entsize = sh[1], sh[4], sh[5], sh[6], sh[9]
        if sh_type not in (SHT_SYMTAB, SHT_DYNSYM) or sh_link >= len(sections):
            continue
        str_off, str_size = sections[sh_link][4], sections[sh_link][5]
        if sh_offset + sh_size > len(m) or str_off + str_size > len(m):
            raise ElfError("symbol table beyond the end of the file")
        if (sh_entsize or _SYM.size) != _SYM.size or sh_size % _SYM.size:
            continue  # not a table of ELF64 symbols: none of it is read
        tables[(sh_offset, sh_size)] = _SymbolTable(sh_offset, sh_size, _SYM.size, str_off,
                                                    str_size)
    count = sum(t.size // _SYM.size for t in tables.values())
    if count > MAX_SYMBOLS:
        raise ElfError(f"{count} symbols, more than {MAX_SYMBOLS} (not read)")
    return tuple(segments), tuple(tables.values())


def _all_functions(m: mmap.mmap, segments: tuple[Segment, ...],
                   tables: tuple[_SymbolTable, ...], by_name: bool,
                   kinds: tuple[int, ...] = _FUNCTION_TYPES) -> ElfSymbols:
    functions: dict[str, int] = {}
    starts, ends, names = array("Q"), array("Q"), array("Q")
    for t in tables:
        # entsize is _SYM.size and size a multiple of it (_headers keeps no other table)
        view = memoryview(m)[t.offset:t.offset + t.size]
        try:
            _table_functions(m, t, _SYM.iter_unpack(view), kinds, by_name, functions,
                             (starts, ends, names))
        finally:
            # An error mid-table leaves the iterator (in its traceback) holding the view,
            # which then goes with the traceback.
            with contextlib.suppress(BufferError):
                view.release()
    order = sorted(range(len(starts)), key=starts.__getitem__)
    return ElfSymbols(
        m, functions, segments, array("Q", (starts[i] for i in order)),
        array("Q", (ends[i] for i in order)), array("Q", (names[i] for i in order)),
    )


def _table_functions(m: mmap.mmap, t: _SymbolTable,
                     entries: Iterator[tuple[int, int, int, int, int, int]],
                     kinds: tuple[int, ...], by_name: bool, functions: dict[str, int],
                     columns: tuple[array[int], array[int], array[int]]) -> None:
    """The symbols of one table of `kinds` into `columns` (start, end, name offset);
    `functions` name -> address when `by_name`. `entries` ends when this returns, so
    that the caller may release the view it reads."""
    starts, ends, names = columns
    for st_name, st_info, _, st_shndx, st_value, st_size in entries:
        if st_info & 0xF not in kinds or st_shndx == SHN_UNDEF:
            continue
        if st_value == 0 or st_name >= t.str_size:
            continue
        name_at = t.str_offset + st_name
        starts.append(st_value)
        ends.append(min(st_value + st_size, _U64))  # both are the file's: may overflow
        names.append(name_at)
        if not by_name:
            continue
        end = m.find(b"\0", name_at, t.str_offset + t.str_size)
        raw = m[name_at:end if end >= 0 else t.str_offset + t.str_size]
        functions.setdefault(raw.decode("utf-8", "replace"), st_value)
