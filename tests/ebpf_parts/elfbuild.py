"""ELF64 little-endian files built in Python for the reader's tests: a load segment, a
string table and symbol tables, every header field at a known place so a test (or
Hypothesis) can set it to anything."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
SHDR = struct.Struct("<IIQQQQIIQQ")
PHDR = struct.Struct("<IIQQQQQQ")
SYM = struct.Struct("<IBBHQQ")
STT_OBJECT, STT_FUNC = 1, 2
STB_GLOBAL = 1
SHT_SYMTAB, SHT_STRTAB = 2, 3
# Where the fields are, for tests that change them.
E_PHENTSIZE, E_PHNUM, E_SHENTSIZE, E_SHNUM = 54, 56, 58, 60
SH_OFFSET, SH_SIZE, SH_LINK, SH_ENTSIZE = 24, 32, 40, 56  # within a section header


@dataclass
class Symbol:
    name: str
    value: int
    size: int = 16
    kind: int = STT_FUNC


@dataclass
class Elf:
    """The file and where its parts are."""

    data: bytearray
    shoff: int
    symtab: int  # offset of the symbols
    sections: list[str] = field(default_factory=list)  # names, in order

    def section(self, name: str, index: int = 0) -> int:
        """The offset of the `index`th section header called `name`."""
        i = [n for n, s in enumerate(self.sections) if s == name][index]
        return self.shoff + i * SHDR.size

    def set(self, fmt: str, at: int, value: int) -> Elf:
        struct.pack_into(fmt, self.data, at, value)
        return self


def build(symbols: list[Symbol], tables: int = 1, filler: bytes = b"") -> Elf:
    """One PT_LOAD of the whole file at 0x1000; .strtab; `tables` section headers that
    name the same .symtab (a null symbol, then `symbols`), or `filler` as its bytes."""
    strtab = bytearray(b"\0")
    entries = bytearray(SYM.size)  # the null symbol
    for s in symbols:
        entries += SYM.pack(len(strtab), s.kind | STB_GLOBAL << 4, 0, 1, s.value, s.size)
        strtab += s.name.encode() + b"\0"
    if filler:
        entries = bytearray(filler)
    strtab_at = EHDR.size + PHDR.size
    symtab_at = (strtab_at + len(strtab) + 7) & ~7
    shoff = (symtab_at + len(entries) + 7) & ~7
    names = ["", ".strtab", *[".symtab"] * tables]
    size = shoff + SHDR.size * len(names)
    data = bytearray(size)
    ident = b"\x7fELF\x02\x01\x01" + b"\0" * 9
    EHDR.pack_into(data, 0, ident, 3, 62, 1, 0, EHDR.size, shoff, 0, EHDR.size,
                   PHDR.size, 1, SHDR.size, len(names), 0)
    PHDR.pack_into(data, EHDR.size, 1, 5, 0, 0x1000, 0x1000, size, size, 0x1000)
    data[strtab_at:strtab_at + len(strtab)] = strtab
    data[symtab_at:symtab_at + len(entries)] = entries
    SHDR.pack_into(data, shoff + SHDR.size, 0, SHT_STRTAB, 0, 0, strtab_at, len(strtab),
                   0, 0, 1, 0)
    for i in range(tables):
        SHDR.pack_into(data, shoff + SHDR.size * (2 + i), 0, SHT_SYMTAB, 0, 0, symtab_at,
                       len(entries), 1, 1, 8, SYM.size)
    return Elf(data, shoff, symtab_at, names)
