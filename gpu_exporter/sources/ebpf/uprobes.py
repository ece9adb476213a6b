"""How uprobes get into the kernel, and out again quickly.

Two mechanisms:

- `uprobe_multi` (Linux 6.6+): one BPF link holds every probe of one program in one
  file (`BPF_LINK_CREATE` with `BPF_TRACE_UPROBE_MULTI`). Closing a link removes its
  probes with one kernel synchronisation, and links closed from several threads at once
  share their synchronisations: 288 links close in 0.3 s on the CI VM, against 0.05 s
  each one after the other.
- `perf_event` (Linux 5.15 to 6.5): one perf event of the uprobe PMU per probe, linked
  to its program (`BPF_LINK_CREATE` with `BPF_PERF_EVENT`, which carries the cookie).
  The kernel removes each under a global mutex with a synchronisation of its own (about
  0.1 s each on the CI VM, whatever the concurrency), so shutdown takes about 0.1 s per
  probe there.

Every probe carries a BPF cookie (which entry point it is: see abi.cookie). bcc 0.26
knows neither links nor cookies; both are a few lines of the bpf(2) and
perf_event_open(2) ABI here.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from gpu_exporter.readers import files
from gpu_exporter.sources.ebpf import arch

UPROBE_MULTI: Final = "uprobe_multi"
PERF_EVENT: Final = "perf_event"
MECHANISMS: Final = (UPROBE_MULTI, PERF_EVENT)

# Syscall numbers are the CPU's: those of the one the collector is built for (arch.py
# gates out every other).
_SYS_BPF: Final = arch.BUILT_FOR.sys_bpf
_SYS_PERF_EVENT_OPEN: Final = arch.BUILT_FOR.sys_perf_event_open
# include/uapi/linux/bpf.h
_BPF_PROG_LOAD: Final = 5
_BPF_LINK_CREATE: Final = 28
_BPF_PROG_TYPE_KPROBE: Final = 2
_BPF_PERF_EVENT: Final = 41  # enum bpf_attach_type
BPF_TRACE_UPROBE_MULTI: Final = 48
_BPF_F_UPROBE_MULTI_RETURN: Final = 1
_ATTR_SIZE: Final = 144  # union bpf_attr as of 6.x; the kernel accepts a zeroed tail
# Threads closing links at once: their kernel synchronisations are shared.
CLOSE_THREADS: Final = 64


class AttachError(Exception):
    pass


@dataclass(frozen=True)
class Point:
    offset: int  # in the file (what a uprobe is placed by)
    program: str  # the BPF function
    ret: bool  # a return probe
    cookie: int = 0  # what the program reads with bpf_get_attach_cookie()


@dataclass
class Attachment:
    """The probes of one file: what detaching it closes."""

    handles: list[Any]
    probes: int


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _bpf(cmd: int, attr: ctypes.Array[ctypes.c_uint8]) -> int:
    fd = _libc.syscall(_SYS_BPF, cmd, attr, _ATTR_SIZE)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(fd)


def _put(attr: ctypes.Array[ctypes.c_uint8], offset: int, ctype: Any, value: int) -> None:
    ctype.from_address(ctypes.addressof(attr) + offset).value = value


def _link_create(prog_fd: int, path: bytes, offsets: Sequence[int], ret: bool,
                 cookies: Sequence[int] = ()) -> int:
    """BPF_LINK_CREATE, attach_type BPF_TRACE_UPROBE_MULTI: union bpf_attr.link_create
    is prog_fd@0, target_fd@4, attach_type@8, flags@12, then uprobe_multi: path@16,
    offsets@24, ref_ctr_offsets@32, cookies@40, cnt@48, flags@52, pid@56."""
    attr = (ctypes.c_uint8 * _ATTR_SIZE)()
    offs = (ctypes.c_uint64 * len(offsets))(*offsets)
    cooks = (ctypes.c_uint64 * len(offsets))(*(cookies or [0] * len(offsets)))
    cpath = ctypes.create_string_buffer(path)
    _put(attr, 0, ctypes.c_uint32, prog_fd)
    _put(attr, 8, ctypes.c_uint32, BPF_TRACE_UPROBE_MULTI)
    _put(attr, 16, ctypes.c_uint64, ctypes.addressof(cpath))
    _put(attr, 24, ctypes.c_uint64, ctypes.addressof(offs))
    _put(attr, 40, ctypes.c_uint64, ctypes.addressof(cooks))
    _put(attr, 48, ctypes.c_uint32, len(offsets))
    _put(attr, 52, ctypes.c_uint32, _BPF_F_UPROBE_MULTI_RETURN if ret else 0)
    return _bpf(_BPF_LINK_CREATE, attr)


def _perf_link_create(prog_fd: int, perf_fd: int, cookie: int) -> int:
    """BPF_LINK_CREATE, attach_type BPF_PERF_EVENT: link_create.perf_event.bpf_cookie@16."""
    attr = (ctypes.c_uint8 * _ATTR_SIZE)()
    _put(attr, 0, ctypes.c_uint32, prog_fd)
    _put(attr, 4, ctypes.c_uint32, perf_fd)
    _put(attr, 8, ctypes.c_uint32, _BPF_PERF_EVENT)
    _put(attr, 16, ctypes.c_uint64, cookie)
    return _bpf(_BPF_LINK_CREATE, attr)


_PERF_ATTR_SIZE: Final = 128
_PERF_FLAG_FD_CLOEXEC: Final = 8


def _uprobe_pmu() -> tuple[int, int]:
    """The uprobe PMU's perf type and the config bit that makes a probe a return probe."""
    root = "/sys/bus/event_source/devices/uprobe"
    pmu = int(files.read_text(f"{root}/type", 4096))
    # "config:0"
    bit = int(files.read_text(f"{root}/format/retprobe", 4096).strip().split(":")[1])
    return pmu, bit


def _perf_uprobe(path: bytes, offset: int, ret: bool) -> int:
    """perf_event_open(2) of a uprobe on every process (pid -1, cpu 0): struct
    perf_event_attr has type@0, size@4, config@8, sample_period@16, config1@56 (the
    path), config2@64 (the offset)."""
    pmu, bit = _uprobe_pmu()
    attr = (ctypes.c_uint8 * _PERF_ATTR_SIZE)()
    cpath = ctypes.create_string_buffer(path)
    _put(attr, 0, ctypes.c_uint32, pmu)
    _put(attr, 4, ctypes.c_uint32, _PERF_ATTR_SIZE)
    _put(attr, 8, ctypes.c_uint64, (1 << bit) if ret else 0)
    _put(attr, 16, ctypes.c_uint64, 1)
    _put(attr, 56, ctypes.c_uint64, ctypes.addressof(cpath))
    _put(attr, 64, ctypes.c_uint64, offset)
    fd = _libc.syscall(_SYS_PERF_EVENT_OPEN, attr, -1, 0, -1, _PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(fd)


def uprobe_multi_supported() -> str | None:
    """None when the kernel has uprobe_multi links, else why not. A two-instruction
    program is loaded and linked to a file that does not exist: a kernel with
    uprobe_multi gets as far as looking the path up (ENOENT)."""
    insns = (ctypes.c_uint64 * 2)(0xB7, 0x95)  # r0 = 0; exit
    license_ = ctypes.create_string_buffer(b"GPL")
    attr = (ctypes.c_uint8 * _ATTR_SIZE)()
    # union bpf_attr, BPF_PROG_LOAD: prog_type@0, insn_cnt@4, insns@8, license@16,
    # expected_attach_type@68
    _put(attr, 0, ctypes.c_uint32, _BPF_PROG_TYPE_KPROBE)
    _put(attr, 4, ctypes.c_uint32, 2)
    _put(attr, 8, ctypes.c_uint64, ctypes.addressof(insns))
    _put(attr, 16, ctypes.c_uint64, ctypes.addressof(license_))
    _put(attr, 68, ctypes.c_uint32, BPF_TRACE_UPROBE_MULTI)
    try:
        prog = _bpf(_BPF_PROG_LOAD, attr)
    except OSError as exc:
        return f"cannot load a BPF program: {exc.strerror}"
    try:
        fd = _link_create(prog, b"/nonexistent/gpu-exporter-uprobe-multi-check", [0], False)
        os.close(fd)  # cannot happen: the path does not exist
        return None
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        return f"the kernel has no uprobe_multi links (Linux 6.6+): {exc.strerror}"
    finally:
        os.close(prog)


def close_all(handles: Iterable[Any], close: Callable[[Any], None]) -> None:
    """Close handles from several threads at once, so that the kernel synchronisations
    they wait for overlap."""
    items = list(handles)
    if len(items) <= 1:
        for h in items:
            close(h)
        return
    with ThreadPoolExecutor(max_workers=min(CLOSE_THREADS, len(items)),
                            thread_name_prefix="ebpf-detach") as pool:
        list(pool.map(close, items))


class Mechanism:
    name: str

    def __init__(self, bpf: Any, bcc: Any) -> None:
        self.bpf = bpf
        self.bcc = bcc
        self._fds: dict[str, int] = {}

    def load(self, programs: Iterable[str]) -> None:
        """Load the uprobe programs into the kernel (the verifier runs here)."""
        for name in programs:
            self._fds[name] = self.bpf.load_func(name.encode(), self.bcc.BPF.KPROBE,
                                                 None, self._attach_type()).fd

    def fd(self, name: str) -> int:
        """The loaded program's file descriptor."""
        return self._fds[name]

    def _attach_type(self) -> int:
        return -1

    def attach(self, path: str, points: Sequence[Point]) -> Attachment:
        raise NotImplementedError

    def detach(self, attachments: Iterable[Attachment]) -> None:
        close_all([h for a in attachments for h in a.handles], self._close)

    def _close(self, handle: Any) -> None:
        raise NotImplementedError


class UprobeMulti(Mechanism):
    name = UPROBE_MULTI

    def _attach_type(self) -> int:
        return BPF_TRACE_UPROBE_MULTI

    def attach(self, path: str, points: Sequence[Point]) -> Attachment:
        groups: dict[tuple[str, bool], list[Point]] = defaultdict(list)
        for p in points:
            groups[(p.program, p.ret)].append(p)
        fds: list[int] = []
        try:
            # Return probes first: a call entered between an entry and its return probe
            # would leave its thread's frame open; a return without its entry is told
            # apart by its cookie and ignored.
            for (program, ret), group in sorted(groups.items(), key=lambda g: not g[0][1]):
                fds.append(_link_create(self._fds[program], path.encode(),
                                        [p.offset for p in group], ret,
                                        [p.cookie for p in group]))
        except OSError as exc:
            close_all(fds, os.close)
            raise AttachError(f"uprobe_multi link: {exc.strerror}") from exc
        return Attachment(fds, len(points))

    def _close(self, handle: Any) -> None:
        os.close(handle)


class PerfEvent(Mechanism):
    """One perf event per probe, each linked to its program with its cookie."""

    name = PERF_EVENT

    def attach(self, path: str, points: Sequence[Point]) -> Attachment:
        handles: list[tuple[int, int]] = []
        try:
            for p in sorted(points, key=lambda p: not p.ret):  # returns first, as above
                perf = _perf_uprobe(path.encode(), p.offset, p.ret)
                try:
                    link = _perf_link_create(self._fds[p.program], perf, p.cookie)
                except OSError:
                    os.close(perf)
                    raise
                handles.append((link, perf))
        except OSError as exc:
            close_all(handles, self._close)
            raise AttachError(f"perf_event uprobe: {exc.strerror}") from exc
        return Attachment(handles, len(points))

    def _close(self, handle: Any) -> None:
        link, perf = handle
        os.close(link)
        os.close(perf)


def mechanism(name: str, bpf: Any, bcc: Any) -> Mechanism:
    return {UPROBE_MULTI: UprobeMulti, PERF_EVENT: PerfEvent}[name](bpf, bcc)
