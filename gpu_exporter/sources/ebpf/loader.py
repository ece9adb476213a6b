"""The BPF program: compiled from program.c by bcc and loaded into the kernel (the
verifier runs), its raw tracepoints and tracepoints attached, the uprobe mechanism chosen.

bcc is imported by the caller, lazily: it costs about 70 MB (LLVM) and is needed only when
the collector is enabled.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
from collections.abc import Callable, Iterable
from importlib import resources
from typing import Any

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.readers import files
from gpu_exporter.sources.ebpf import compiler_pages, uprobes

TRACEFS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
# (category, event, program, {format field: the -D name of its offset})
TRACEPOINTS: tuple[tuple[str, str, str, dict[str, str]], ...] = (
    ("sched", "sched_process_exec", "on_exec", {}),
    ("syscalls", "sys_enter_mmap", "on_mmap",
     {"prot": "TP_MMAP_PROT_OFF", "flags": "TP_MMAP_FLAGS_OFF", "fd": "TP_MMAP_FD_OFF"}),
    ("syscalls", "sys_exit_mmap", "on_mmapped", {"ret": "TP_MMAP_RET_OFF"}),
)
# The offsets of those fields on x86-64 (arch.py; syscall records: 8 bytes of common fields, the
# syscall number, then one 8-byte slot per argument), used when tracefs is not readable.
DEFAULT_TRACEPOINT_OFFSETS = {"TP_MMAP_PROT_OFF": 32, "TP_MMAP_FLAGS_OFF": 40,
                              "TP_MMAP_FD_OFF": 48, "TP_MMAP_RET_OFF": 16}
# Raw tracepoints (no tracefs needed) the probes cannot do without: a thread's exit frees
# its state's place (program.c, fast_threads).
RAW_TRACEPOINTS: tuple[tuple[str, str], ...] = (("sched_process_exit", "on_thread_exit"),)
_FIELD = re.compile(r"field:[^;]*?\b(\w+)(?:\[\d*\])?;\s*offset:(\d+);")


def scalar(x: Any) -> int:
    """A map key or value of a scalar type: batched reads give ints, others ctypes."""
    return x if isinstance(x, int) else int(x.value)


class LoadError(Exception):
    """The BPF program did not compile, load or verify."""


def program_text() -> str:
    return resources.files("gpu_exporter.sources.ebpf").joinpath("program.c").read_text()


def tracefs() -> str | None:
    for root in TRACEFS:
        if os.path.isdir(f"{root}/events"):
            return root
    return None


def tracepoint_offsets() -> tuple[dict[str, int], str | None]:
    """The record offsets the tracepoint programs read, from tracefs' format files; and
    why exec/mmap tracking cannot work here, if it cannot."""
    offsets = dict(DEFAULT_TRACEPOINT_OFFSETS)
    root = tracefs()
    if root is None:
        return offsets, "tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)"
    for category, event, _, fields in TRACEPOINTS:
        try:
            text = files.read_text(f"{root}/events/{category}/{event}/format", 64 * 1024)
            found = {m.group(1): int(m.group(2)) for m in _FIELD.finditer(text)}
        except OSError as exc:
            return offsets, f"tracepoint {category}:{event} not readable: {exc}"
        for name, define in fields.items():
            if name not in found:
                return offsets, f"tracepoint {category}:{event} has no field {name}"
            offsets[define] = found[name]
    return offsets, None


def load_bpf(bcc: Any, offsets: dict[str, int] | None = None,
             extra_flags: tuple[str, ...] = ()) -> Any:
    flags = abi.defines() + [f"-D{k}={v}" for k, v in
                             sorted((offsets or DEFAULT_TRACEPOINT_OFFSETS).items())]
    flags += extra_flags
    try:
        bpf = bcc.BPF(text=program_text().encode(), cflags=flags)
    except Exception as exc:
        raise LoadError(f"BPF program failed to compile or load: {exc}") from exc
    # LLVM leaves tens of MB of freed heap behind, and its code is not run again: give
    # both back.
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).malloc_trim(0)
    with contextlib.suppress(OSError):
        compiler_pages.release()
    return bpf


def uprobe_programs() -> list[str]:
    return [*abi.ENTRY_PROGRAMS, abi.RETURN_PROGRAM, abi.RETURN_PROGRAM_DRIVER]


# The programs the return programs tail-call, in the order of program.c's `tails`.
TAIL_PROGRAMS: tuple[str, ...] = ("close_groups",)


def load_tails(mech: uprobes.Mechanism) -> None:
    """The tail-called programs loaded (as uprobe programs: a tail call stays within one
    program type and attach type) and set in `tails`."""
    mech.load(TAIL_PROGRAMS)
    table = mech.bpf["tails"]
    for i, name in enumerate(TAIL_PROGRAMS):
        table[ctypes.c_int(i)] = ctypes.c_int(mech.fd(name))


def attach_raw_tracepoints(bpf: Any, bcc: Any) -> list[int]:
    """RAW_TRACEPOINTS attached (before any probe, which they clean up after); their fds."""
    from bcc.libbcc import lib

    fds: list[int] = []
    for event, program in RAW_TRACEPOINTS:
        try:
            fd = bpf.load_func(program.encode(), bcc.BPF.RAW_TRACEPOINT).fd
        except Exception as exc:
            uprobes.close_all(fds, os.close)
            raise LoadError(f"BPF program {program} failed to load: {exc}") from exc
        tp = lib.bpf_attach_raw_tracepoint(fd, event.encode())
        if tp < 0:
            uprobes.close_all(fds, os.close)
            raise LoadError(f"cannot attach to raw tracepoint {event} (error {tp})")
        fds.append(tp)
    return fds


def choose_mechanism(wanted: str) -> tuple[str, str | None]:
    """The attach mechanism to use, and why the better one is not used, if it is not."""
    if wanted == uprobes.PERF_EVENT:
        return uprobes.PERF_EVENT, "perf_event chosen by --ebpf.attach-mechanism"
    problem = uprobes.uprobe_multi_supported()
    if problem is None:
        return uprobes.UPROBE_MULTI, None
    if wanted == uprobes.UPROBE_MULTI:
        raise LoadError(f"--ebpf.attach-mechanism=uprobe_multi: {problem}")
    return uprobes.PERF_EVENT, problem


def check(bcc: Any) -> str:
    """What `doctor` does instead of start(): compile the program, load every program
    into the kernel (the verifier runs), attach nothing. Raises LoadError."""
    offsets, _ = tracepoint_offsets()
    bpf = load_bpf(bcc, offsets)
    try:
        name, _ = choose_mechanism("auto")
        mech = uprobes.mechanism(name, bpf, bcc)
        try:
            mech.load(uprobe_programs())
            load_tails(mech)
            for _, _, program, _ in TRACEPOINTS:
                bpf.load_func(program.encode(), bcc.BPF.TRACEPOINT)
            for _, program in RAW_TRACEPOINTS:
                bpf.load_func(program.encode(), bcc.BPF.RAW_TRACEPOINT)
        except Exception as exc:
            raise LoadError(f"BPF program failed to load: {exc}") from exc
        return name
    finally:
        bpf.cleanup()


class Program:
    """The BPF program in the kernel: its maps (`bpf`), the mechanism its uprobes attach
    through, the raw tracepoints and the tracepoints (exec and mmap tracking) attached."""

    def __init__(self, wanted_mechanism: str = "auto") -> None:
        self.wanted_mechanism = wanted_mechanism
        self.bpf: Any = None
        self.mech: uprobes.Mechanism | None = None
        self.mechanism_problem: str | None = None  # why uprobe_multi is not used
        self.tracking_problem: str | None = None  # why exec/mmap tracking is off
        self.tracepoint_fds: list[int] = []

    @property
    def mechanism(self) -> str:
        return self.mech.name if self.mech is not None else ""

    def load(self, bcc: Any) -> None:
        """Compile the program and load it (raises LoadError; nothing to undo then)."""
        offsets, self.tracking_problem = tracepoint_offsets()
        self.bpf = load_bpf(bcc, offsets)

    def open(self, bcc: Any, on_event: Callable[[Any, Any, int], int],
             on_proc_event: Callable[[Any, Any, int], int]) -> str:
        """The loaded program made ready to attach uprobes (its mechanism chosen, its
        uprobe programs loaded), its raw tracepoints and tracepoints attached and its ring
        buffers read by the two callbacks; the mechanism's name. On an exception, what
        was done is undone by unload()."""
        name, self.mechanism_problem = choose_mechanism(self.wanted_mechanism)
        self.mech = uprobes.mechanism(name, self.bpf, bcc)
        try:
            self.mech.load(uprobe_programs())
            load_tails(self.mech)
        except Exception as exc:
            raise LoadError(f"BPF program failed to load: {exc}") from exc
        self.tracepoint_fds += attach_raw_tracepoints(self.bpf, bcc)
        self.bpf["events"].open_ring_buffer(on_event)
        self.bpf["procs"].open_ring_buffer(on_proc_event)
        if self.tracking_problem is None:
            self._attach_tracepoints(bcc)
        return name

    def _attach_tracepoints(self, bcc: Any) -> None:
        from bcc.libbcc import lib

        for category, event, program, _ in TRACEPOINTS:
            try:
                fd = self.bpf.load_func(program.encode(), bcc.BPF.TRACEPOINT).fd
            except Exception as exc:
                raise LoadError(f"BPF program {program} failed to load: {exc}") from exc
            tp = lib.bpf_attach_tracepoint(fd, category.encode(), event.encode())
            if tp < 0:
                self.tracking_problem = f"cannot attach to tracepoint {category}:{event}"
                return
            self.tracepoint_fds.append(tp)

    def unload(self, attachments: Iterable[uprobes.Attachment]) -> None:
        """The uprobes of `attachments` detached, the tracepoints closed, the program
        and its maps freed."""
        if self.mech is not None:
            self.mech.detach(attachments)
        uprobes.close_all(self.tracepoint_fds, os.close)
        self.tracepoint_fds = []
        self.bpf.cleanup()
