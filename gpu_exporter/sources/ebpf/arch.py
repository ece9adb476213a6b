"""The CPUs the eBPF collector is built and tested for, and what it assumes of them.

The probes read each call's arguments where one CPU's calling convention puts them, and
the engine talks to the kernel with one CPU's syscall numbers. On another CPU they would
not fail cleanly: they would read the wrong registers and stack slots, and count garbage
(or ask the kernel for another syscall). So the collector runs only on a machine listed
in SUPPORTED (by `uname -m`) and is `unavailable` everywhere else, with the reason and
the fix; the rest of the exporter does not depend on it (docs/ebpf.md, "CPU
architectures").

What x86-64 (System V AMD64 ABI, Linux) gives the probes, and where it is used:

- syscall numbers: bpf(2) 321 and perf_event_open(2) 298 (`uprobes.py`; aarch64 has 280
  and 241);
- integer arguments 1 to 6 in rdi, rsi, rdx, rcx, r8, r9 (`PT_REGS_PARM1..6` in
  program.c), the 7th and later on the stack, 8 bytes each above the return address
  (`stack_arg`, the `*_STACK_SLOT` constants of `abi.py`; aarch64 passes 8 in
  registers);
- a 12-byte `dim3` by value in two registers, x | y << 32 then z (`dim3_count`);
- the return address on the stack at a function's first instruction, so a call returns
  with the stack pointer 8 bytes above its entry's (`returned` in program.c; aarch64
  keeps it in the link register and the stack pointer is unchanged);
- the syscall tracepoint records' layout, used when tracefs cannot be read
  (`loader.DEFAULT_TRACEPOINT_OFFSETS`), and mmap's PROT_EXEC (4) and MAP_ANONYMOUS
  (0x20) bits (`on_mmap`; the same on aarch64, not on every CPU);
- the CUDA structures' offsets (`abi.py`): those of the LP64 layout, the same on aarch64,
  but checked only against x86-64 builds of NVIDIA's headers and libraries.

aarch64 (Grace Hopper, Grace Blackwell) is not listed: nothing here can run its probes.
qemu-user emulates a CPU for user space only, and would hand the bpf(2) syscall to this
x86-64 kernel, so no test could load, attach or read an aarch64 probe.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from gpu_exporter.model.features import Availability


@dataclass(frozen=True)
class Machine:
    """A CPU the collector is built for: what of it the engine uses from Python (the
    rest, the registers and stack layout, is program.c's and abi.py's)."""

    name: str  # as uname(2) says it (`uname -m`, platform.machine())
    sys_bpf: int
    sys_perf_event_open: int


X86_64: Final = Machine("x86_64", sys_bpf=321, sys_perf_event_open=298)
SUPPORTED: Final[Mapping[str, Machine]] = {m.name: m for m in (X86_64,)}
# The one machine the engine's constants are for (uprobes.py): every other is gated out.
BUILT_FOR: Final = X86_64

FIX: Final = (
    "turn the eBPF collector off on this node (drop --collector.ebpf and "
    "OTEL_GPU_EBPF_ENABLED): every other collector runs; which CPUs are supported and "
    "why: docs/ebpf.md#cpu-architectures")


def unsupported(machine: str | None = None) -> Availability | None:
    """`unavailable` with the reason and the fix when the collector is not built for this
    CPU (or `machine`, as uname says it); None when it is."""
    name = platform.machine() if machine is None else machine
    if name in SUPPORTED:
        return None
    return Availability.unavailable(
        f"eBPF probes are built and tested for {', '.join(sorted(SUPPORTED))} only, this "
        f"CPU is {name or 'unknown'}: its calls pass arguments in other registers and "
        "stack slots, and its syscalls have other numbers", FIX)
