"""The ELF reader of the eBPF collector (gpu_exporter/sources/ebpf/elf.py) runs as root on
any file a process maps: whatever the bytes, it answers or raises ElfError, and its work
per file is capped (issue #32). Files are built in Python (tests/ebpf_parts/elfbuild.py)
and read from anonymous mappings: no root, no compiler."""

from __future__ import annotations

import mmap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpu_exporter.sources.ebpf import elf
from tests.ebpf_parts.elfbuild import (
    E_PHENTSIZE,
    E_PHNUM,
    E_SHENTSIZE,
    E_SHNUM,
    SH_ENTSIZE,
    SH_LINK,
    SH_OFFSET,
    SH_SIZE,
    STT_OBJECT,
    SYM,
    Elf,
    Symbol,
    build,
)

SYMBOLS = [Symbol("cudaLaunchKernel", 0x1100, 64), Symbol("__cudaLaunchKernel", 0x1100, 64),
           Symbol("cuInit", 0x1200, 32), Symbol("_Z6kernelPf", 0x1300, 0),
           Symbol("kernel_handle", 0x1400, 8, STT_OBJECT)]


def mapped(data: bytes | bytearray) -> mmap.mmap:
    m = mmap.mmap(-1, max(1, len(data)))
    m.write(bytes(data))
    return m


def test_a_built_file_reads_as_it_was_written() -> None:
    f = elf.ElfFile(mapped(build(SYMBOLS).data))
    assert f.functions(["cudaLaunchKernel", "cuInit", "kernel_handle", "absent"]) == {
        "cudaLaunchKernel": 0x1100, "cuInit": 0x1200}
    syms = f.symbols()
    assert len(syms) == 4
    assert syms.function_at(0x1120) in ("cudaLaunchKernel", "__cudaLaunchKernel")
    assert syms.function_at(0x1300) == "_Z6kernelPf"  # size 0: its start only
    assert syms.function_at(0x1301) is None
    assert f.objects().function_at(0x1400) == "kernel_handle"
    assert f.offset_of_vaddr(0x1100) == 0x100


@pytest.mark.parametrize("entsize", [1, 8, 23, 25, 48, 1 << 40])
def test_a_symbol_table_of_another_entry_size_is_not_read(entsize: int) -> None:
    """The issue's case: 4 MiB of symbols whose table says entsize 1 were read as 4 Mi
    overlapping symbols by symbols() and objects() (1,119 ms, 185,946 symbols made up
    of other symbols' bytes; entsize 24: 120 ms). Now none of it is read, by any of the
    three readers, as functions() already did."""
    n = (4 << 20) // SYM.size
    e = build([Symbol(f"f{i}", 0x1000 + 16 * i) for i in range(n)])
    e.set("<Q", e.section(".symtab") + SH_ENTSIZE, entsize)
    f = elf.ElfFile(mapped(e.data))
    began = time.monotonic()
    assert len(f.symbols()) == 0
    assert len(f.objects()) == 0
    assert f.functions(["f1", "f100"]) == {}
    assert time.monotonic() - began < 0.5  # 0 ms on a quiet machine: nothing is read


def test_a_table_size_that_is_not_a_multiple_of_the_entry_is_not_read() -> None:
    e = build(SYMBOLS)
    e.set("<Q", e.section(".symtab") + SH_SIZE, SYM.size * 3 + 5)
    f = elf.ElfFile(mapped(e.data))
    assert len(f.symbols()) == 0 and f.functions(["cuInit"]) == {}


@pytest.mark.parametrize(("field", "value", "error"), [
    (E_PHENTSIZE, 1, "program headers of 1 bytes, not 56"),
    (E_SHENTSIZE, 8, "section headers of 8 bytes, not 64"),
])
def test_headers_of_another_entry_size_are_refused(field: int, value: int, error: str) -> None:
    e = build(SYMBOLS).set("<H", field, value)
    with pytest.raises(elf.ElfError, match=error):
        elf.ElfFile(mapped(e.data))


def test_the_symbols_per_file_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    """MAX_SYMBOLS over all tables; a table named by many section headers (up to 65,535)
    is read once, not once per header."""
    monkeypatch.setattr(elf, "MAX_SYMBOLS", 100)
    many_headers = build(SYMBOLS, tables=2000)
    assert len(elf.ElfFile(mapped(many_headers.data)).symbols()) == 4
    over = build([Symbol(f"f{i}", 0x1000 + i) for i in range(100)])  # + the null symbol
    with pytest.raises(elf.ElfError, match="101 symbols, more than 100"):
        elf.ElfFile(mapped(over.data))


def test_a_million_aliases_cost_one_lookup_no_more() -> None:
    """Symbols at one address are looked through up to 64 deep for the one that holds a
    code address; a file with 20,000 aliases of one function answers at once."""
    e = build([Symbol(f"alias{i}", 0x1100, 1) for i in range(20_000)])
    syms = elf.ElfFile(mapped(e.data)).symbols()
    began = time.monotonic()
    for _ in range(1000):
        assert syms.function_at(0x1180) is None
    assert time.monotonic() - began < 1.0


def test_sizes_that_overflow_64_bits_are_clamped() -> None:
    e = build([Symbol("huge", (1 << 64) - 16, (1 << 64) - 1), *SYMBOLS])
    syms = elf.ElfFile(mapped(e.data)).symbols()
    assert syms.function_at((1 << 64) - 8) == "huge"


def test_read_symbols_of_every_name_raises_elf_error_only(tmp_path: Path) -> None:
    path = tmp_path / "lib.so"
    path.write_bytes(build(SYMBOLS).data)
    assert elf.read_symbols(str(path)).functions["cuInit"] == 0x1200
    path.write_bytes(b"\x7fELF\x02\x01" + b"\0" * 10)
    with pytest.raises(elf.ElfError):
        elf.read_symbols(str(path))


def _read_all(data: bytes | bytearray) -> None:
    """Everything the eBPF collector asks of a file: an answer or ElfError, nothing else."""
    try:
        f = elf.ElfFile(mapped(data))
    except elf.ElfError:
        return
    assert isinstance(f.functions(["cudaLaunchKernel", "cuInit", "x"]), dict)
    for table in (f.symbols, f.objects):
        try:
            syms = table()
        except elf.ElfError:
            continue
        assert len(syms) <= len(data) // SYM.size  # no byte read as two symbols
        for vaddr in (0, 0x1100, 0x1300, 0x1400, (1 << 64) - 1):
            assert syms.function_at(vaddr) is None or isinstance(syms.function_at(vaddr), str)
        f.vaddr_of_offset(0x100)
        f.offset_of_vaddr(0x1100)


_BASE = build(SYMBOLS)
_FUZZ = settings(max_examples=300, deadline=2000,
                 suppress_health_check=[HealthCheck.too_slow])
_u16 = st.integers(0, 0xFFFF)
_u64 = st.one_of(st.integers(0, 1 << 12), st.sampled_from(
    [SYM.size, SYM.size - 1, (1 << 63), (1 << 64) - 1, len(_BASE.data)]))


@_FUZZ
@given(st.binary(max_size=1024))
def test_fuzz_any_bytes(data: bytes) -> None:
    _read_all(b"\x7fELF\x02\x01\x01" + data)


@_FUZZ
@given(st.lists(st.tuples(st.integers(0, len(_BASE.data) - 1), st.integers(0, 255)),
                max_size=24))
@example([(E_SHNUM, 0xFF), (E_SHNUM + 1, 0xFF)])
def test_fuzz_a_real_file_with_bytes_changed(changes: list[tuple[int, int]]) -> None:
    data = bytearray(_BASE.data)
    for at, byte in changes:
        data[at] = byte
    _read_all(data)


@_FUZZ
@given(phentsize=_u16, phnum=_u16, shentsize=_u16, shnum=_u16, offset=_u64, size=_u64,
       link=st.integers(0, 8), entsize=_u64, cut=st.integers(0, 200),
       symbol=st.tuples(st.integers(0, len(SYMBOLS)), _u64, _u64))
@example(phentsize=56, phnum=1, shentsize=64, shnum=4, offset=_BASE.symtab,
         size=SYM.size * 6, link=1, entsize=1, cut=0, symbol=(0, 0, 0))
@example(phentsize=56, phnum=1, shentsize=64, shnum=4, offset=_BASE.symtab,
         size=SYM.size * 6, link=1, entsize=24, cut=0, symbol=(1, (1 << 64) - 1, 1 << 63))
def test_fuzz_the_header_fields(phentsize: int, phnum: int, shentsize: int, shnum: int,
                                offset: int, size: int, link: int, entsize: int,
                                cut: int, symbol: tuple[int, int, int]) -> None:
    e = Elf(bytearray(_BASE.data), _BASE.shoff, _BASE.symtab, _BASE.sections)
    symtab = e.section(".symtab")
    e.set("<H", E_PHENTSIZE, phentsize).set("<H", E_PHNUM, phnum)
    e.set("<H", E_SHENTSIZE, shentsize).set("<H", E_SHNUM, shnum)
    e.set("<Q", symtab + SH_OFFSET, offset).set("<Q", symtab + SH_SIZE, size)
    e.set("<I", symtab + SH_LINK, link).set("<Q", symtab + SH_ENTSIZE, entsize)
    index, value, size = symbol  # st_value, st_size of one symbol (0: the null one)
    e.set("<Q", _BASE.symtab + index * SYM.size + 8, value)
    e.set("<Q", _BASE.symtab + index * SYM.size + 16, size)
    _read_all(e.data[:len(e.data) - cut])
