"""What the sources of one scrape say, read once for every collector of that scrape:
`ScrapeInputs`, made by the scrape layer (scrape/exporter.py) for each scrape and handed
to each collector in its Sink. A part is read lazily, by the first collector that asks
for it; the others wait for that read (never past their deadline) and get the same
record. It is gone with the scrape, so nothing read for one scrape is served to another.

It holds every input more than one collector reads, each a typed method: the host's DRM
fdinfo walk (intel, processes and eBPF's HIP device view), the holders of the Gaudi
accel nodes, and NVML's process lists of every GPU (the processes collector's memory per
process, eBPF's device of each CUDA call), read in one round of the NVML stack's lanes
(`sources/nvml/process_reads.py`). What a collector keeps between scrapes (the processes
collector's utilization sampling, say) stays with that collector."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from gpu_exporter.readers.procfs import accel, fdinfo
from gpu_exporter.sources.nvml.calls import NvmlUnavailable
from gpu_exporter.sources.nvml.process_reads import (
    RETURN_MARGIN_SECONDS,
    ProcessLists,
    ProcessRound,
)
from gpu_exporter.sources.nvml.stack import NvmlStack, StackBusy

T = TypeVar("T")
K = TypeVar("K")


class _Lazy(Generic[T]):
    """`read()` run once, by the first caller; the others wait for it until their
    deadline (a time.monotonic() value; TimeoutError). Its exception is every caller's."""

    def __init__(self, read: Callable[[], T], what: str) -> None:
        self._read, self._what = read, what
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._owned = False
        self._value: T | None = None
        self._error: BaseException | None = None

    def get(self, deadline: float) -> T:
        with self._lock:
            owner, self._owned = not self._owned, True
        if owner:
            try:
                self._value = self._read()
            except BaseException as exc:
                self._error = exc
            finally:
                self._done.set()
        elif not self._done.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"{self._what}: another collector's read passed the "
                               "scrape deadline")
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set when no error


# A collector waiting for NVML's process lists that another collector is finishing waits
# this much past the reads' end: the finisher stops at that very deadline, and its
# results must not be lost to the waiter by a race of a few microseconds.
_NVML_WAIT_GRACE_SECONDS = 0.05


class ScrapeInputs:
    """The inputs of one scrape (see the module's docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._drm: dict[str, _Lazy[list[fdinfo.DrmClient]]] = {}
        self._accel: dict[str, _Lazy[dict[int, tuple[int, ...]]]] = {}
        # NVML's process reads, by stack (there is one a process): the round started,
        # and its results
        self._nvml_round: dict[NvmlStack, _Lazy[ProcessRound]] = {}
        self._nvml_lists: dict[NvmlStack, _Lazy[ProcessLists]] = {}

    def drm_clients(self, procfs: str, deadline: float) -> list[fdinfo.DrmClient]:
        """Every DRM client of the host (all drivers), walked once this scrape however
        many collectors ask. TimeoutError when the walk passes `deadline`, for every
        collector that asked."""
        return self._once(self._drm, procfs, lambda: fdinfo.read_drm_clients(
            procfs, deadline=deadline), "DRM fdinfo walk").get(deadline)

    def accel_holders(self, procfs: str, deadline: float) -> dict[int, tuple[int, ...]]:
        """Accel node minor -> the pids holding it open (Gaudi), walked once this scrape.
        TimeoutError when the walk passes `deadline`."""
        return self._once(self._accel, procfs, lambda: accel.read_accel_holders(
            procfs, deadline=deadline), "accel node walk").get(deadline)

    def begin_nvml_processes(self, stack: NvmlStack, deadline: float) -> None:
        """Starts reading NVML's process lists now, in the stack's lanes, if no collector
        has yet (`deadline`: the scrape's): the caller reads its other sources
        meanwhile, and `nvml_processes` later finds them read or under way. Never
        raises: what went wrong is raised by `nvml_processes`."""
        with contextlib.suppress(NvmlUnavailable, StackBusy, TimeoutError):
            self._nvml_begun(stack, deadline).get(deadline - RETURN_MARGIN_SECONDS)

    def nvml_processes(self, stack: NvmlStack, deadline: float) -> ProcessLists:
        """Every GPU's process lists this scrape (`deadline`: the scrape's), read once in
        one round of the NVML stack's lanes whoever asks first. Raises NvmlUnavailable
        and StackBusy (no live NVML session), TimeoutError (another collector's round
        passed the deadline), for every collector that asks."""
        reads_end = deadline - RETURN_MARGIN_SECONDS
        begun = self._nvml_begun(stack, deadline)
        lists = self._once(self._nvml_lists, stack,
                           lambda: begun.get(reads_end).finish(reads_end),
                           "NVML process lists")
        return lists.get(reads_end + _NVML_WAIT_GRACE_SECONDS)

    def _nvml_begun(self, stack: NvmlStack, deadline: float) -> _Lazy[ProcessRound]:
        return self._once(self._nvml_round, stack,
                          lambda: ProcessRound(stack, deadline - RETURN_MARGIN_SECONDS),
                          "NVML session")

    def _once(self, table: dict[K, _Lazy[T]], key: K, read: Callable[[], T],
              what: str) -> _Lazy[T]:
        """The read of `key` in `table` this scrape: the first caller's `read`."""
        with self._lock:
            lazy = table.get(key)
            if lazy is None:
                lazy = table[key] = _Lazy(read, what)
        return lazy
