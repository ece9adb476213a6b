"""Gives back the resident pages of the compiler once the BPF program is compiled.

bcc compiles with clang and LLVM, linked in as libclang-cpp and libLLVM: compiling maps
about 70 MB of their code into the process, and that code is never run again (loading,
attaching and reading maps go through libbcc and the bpf(2) system call). Those pages
are clean copies of the library files: madvise(MADV_DONTNEED) unmaps them, so they
leave the resident set and the page cache may reclaim them; were the code run again,
it would be paged back in from the file. Only mappings the process cannot write and
that hold no private (copy-on-write) page are touched: nothing in them can be lost.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from gpu_exporter.readers import files

log = logging.getLogger("gpu_exporter.ebpf")

COMPILER_LIBRARIES: Final = ("libLLVM", "libclang")
_MADV_DONTNEED: Final = 4
_SMAPS_MAX_BYTES: Final = 64 * 1024 * 1024  # ~1 KiB a mapping of the exporter itself


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str
    path: str
    rss_kb: int
    anonymous_kb: int


def mappings(smaps: str = "/proc/self/smaps") -> Iterator[Mapping]:
    head: list[str] | None = None
    fields: dict[str, int] = {}

    def done() -> Mapping | None:
        if head is None:
            return None
        lo, hi = head[0].split("-")
        return Mapping(int(lo, 16), int(hi, 16), head[1], head[5] if len(head) > 5 else "",
                       fields.get("Rss", 0), fields.get("Anonymous", 0))

    for line in files.read_text(smaps, _SMAPS_MAX_BYTES).splitlines():
        parts = line.split()
        if parts and "-" in parts[0] and not parts[0].endswith(":"):
            m = done()
            if m is not None:
                yield m
            head, fields = parts, {}
        elif len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
            fields[parts[0][:-1]] = int(parts[1])
    m = done()
    if m is not None:
        yield m


def releasable(m: Mapping) -> bool:
    return (os.path.basename(m.path).startswith(COMPILER_LIBRARIES) and "w" not in m.perms
            and m.anonymous_kb == 0 and m.rss_kb > 0)


def release() -> int:
    """Unmap the compiler's resident clean pages; the kilobytes given back."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    freed = 0
    for m in list(mappings()):
        if releasable(m) and libc.madvise(m.start, m.end - m.start, _MADV_DONTNEED) == 0:
            freed += m.rss_kb
    log.debug("gave back %d kB of compiler pages", freed)
    return freed
