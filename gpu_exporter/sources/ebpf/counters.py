"""What a counter of the BPF maps is reported as: its labels (the executable, the kernel's
name, the API, the device), the kernel nodes of an executable graph it counts the launches
of, and where its count splits once its device becomes known.

Pure bookkeeping over the names and graphs the event loop learned: nothing here reads a
BPF map, so it can be driven with counters the test writes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.sources.ebpf import cuda_errors, hip_errors
from gpu_exporter.sources.ebpf.graphs import PENDING, Graphs
from gpu_exporter.sources.ebpf.names import OTHER
from gpu_exporter.sources.ebpf.reading import CallKey, NvmlView
from gpu_exporter.sources.ebpf.resolve import Resolver

Row = tuple[tuple[int, CallKey, int], int]  # ((family, key, slot), count)
# A counter of the BPF maps: (where: STATS or SHAPES, process, family, sub, id, device,
# slot); a launch counter of a shape value is the same as its `stats` key would be.
CounterId = tuple[int, int, int, int, int, int, int]
STATS, SHAPES = 0, 1


class Pending(Exception):
    """A graph launch's executable graph: its event has not been read yet."""


def launch_tag(tag: int) -> tuple[int, int, int]:
    """(api, kernel id, device) of a launch counter's tag in a shape value (struct lslot:
    id | api << 48 | device << 56)."""
    return tag >> 48 & 0xFF, tag & (1 << 48) - 1, tag >> 56


def serial(fam: int, sub: int, ident: int) -> int | None:
    """The executable graph serial a launch counter counts by, or None."""
    if fam == abi.FAM_LAUNCH and sub in abi.GRAPH_APIS and ident & abi.GRAPH_SERIAL_BIT:
        return ident & ~abi.GRAPH_SERIAL_BIT
    return None


def _one_row(key: tuple[int, CallKey, int], n: int) -> list[Row]:
    return [(key, n)]


class Counters:
    """Turns BPF counters into rows: (family, CallKey, slot) and a count."""

    def __init__(self, resolver: Resolver, graphs: Graphs, pid_label: bool) -> None:
        self.resolver = resolver
        self.graphs = graphs
        self.pid_label = pid_label
        self.nvml: NvmlView | None = None  # for the read under way
        self._devices: dict[tuple[int, int, int, bool], str] = {}
        # What each counter had counted when last read with no device known: it stays in
        # the device-less series once the device is known (see split).
        self._undeviced: dict[CounterId, int] = {}

    def forget(self, tgids: set[int]) -> None:
        """Exited processes, folded: their devices and device-less counts dropped."""
        for cached in [k for k in self._devices if k[0] in tgids]:
            del self._devices[cached]
        for counter in [c for c in self._undeviced if c[1] in tgids]:
            del self._undeviced[counter]

    def folded(self, counter: CounterId) -> None:
        """A counter moved out of the maps (final): nothing of it is split any more."""
        self._undeviced.pop(counter, None)

    def shape_rows(self, tgid: int, v: Any, strict: bool = False) -> Iterator[Row]:
        """A process's shape value: its grid and block histograms, and the launch counters
        kept there (see struct lslot); a counter of a graph whose event has not been read
        is left out (`strict`: raises Pending, and only that is of use)."""
        key = self.key(tgid, abi.FAM_GRID, 0, 0)
        for fam, slots, total in ((abi.FAM_GRID, v.grid, v.grid_sum),
                                  (abi.FAM_BLOCK, v.block, v.block_sum)):
            for slot, n in [*enumerate(slots), (abi.SLOT_SUM, total)]:
                if n or slot == abi.SLOT_SUM:
                    yield from self.split((SHAPES, tgid, fam, 0, 0, 0, slot),
                                          partial(_one_row, (fam, key, slot)), int(n))
        for launch in v.launches:
            tag, n = int(launch.tag), int(launch.n)
            if not tag:
                continue
            api, ident, dev = launch_tag(tag)
            try:
                yield from self.counter_rows(SHAPES, tgid, abi.FAM_LAUNCH, api, ident, dev,
                                             0, n)
            except Pending:
                if strict:
                    raise

    def counter_rows(self, where: int, tgid: int, fam: int, sub: int, ident: int, dev: int,
                     slot: int, n: int) -> list[Row]:
        """The rows of one BPF counter that has counted `n` (see rows and split)."""
        return self.split((where, tgid, fam, sub, ident, dev, slot),
                          lambda m: list(self.rows(tgid, fam, sub, ident, dev, slot, m)), n)

    def split(self, counter: CounterId, rows: Callable[[int], list[Row]], n: int) -> list[Row]:
        """The rows of `counter` at `n`, split where its device became known: what it had
        counted when last read without a device stays in the device-less series it was
        reported in, and only what it counted since goes to its device's series. Without
        --ebpf.pid-label the device-less series is shared by every process of the name:
        moving a process's whole count out of it would make it go down (a counter reset
        to Prometheus, and increase() counting those launches twice)."""
        now = rows(n)
        if not now or now[0][0][1].device is None:
            if n:
                self._undeviced[counter] = n
            return now
        before = self._undeviced.get(counter, 0)
        if not before or n < before:  # (less: not the counter it was, a reused pid)
            return now
        return [*(((fam, key._replace(device=None), slot), m)
                  for (fam, key, slot), m in rows(before)), *rows(n - before)]

    def rows(self, tgid: int, fam: int, sub: int, ident: int, dev: int, slot: int, n: int,
             ) -> Iterator[tuple[tuple[int, CallKey, int], int]]:
        """The rows one BPF counter makes: itself, or for the launches of an executable
        graph whose kernels are known, one per kernel node (n times each). Raises
        Pending while its graph's event may still be on the way."""
        graph_serial = serial(fam, sub, ident)
        if graph_serial is not None:
            kernels = self.graphs.kernels(tgid, graph_serial)
            if kernels is PENDING:
                raise Pending(tgid)
            if isinstance(kernels, Counter):
                graph = self.key(tgid, fam, sub, ident, dev)
                label = self.resolver.kernel_label
                for (api, kernel), times in kernels.items():
                    yield ((fam, graph._replace(kernel_name=label(tgid, api, kernel)), slot),
                           n * times)
                return
        yield (fam, self.key(tgid, fam, sub, ident, dev), slot), n
    def key(self, tgid: int, fam: int, sub: int, ident: int, dev: int | None = None,
             ) -> CallKey:
        """What a counter of the BPF maps is reported by. `dev`: the calling thread's
        device (struct skey.dev); None for what is kept per process (launch shapes)."""
        r = self.resolver
        pid = tgid if self.pid_label else None
        api = sub & 0xFF if fam in (abi.FAM_LAUNCH, abi.FAM_ALLOC, abi.FAM_DURATION,
                                    abi.FAM_ELAPSED) else (
            abi.API_DRIVER if fam == abi.FAM_ERROR and sub < len(abi.ALL_PROBES)
            and abi.ALL_PROBES[sub].driver else abi.API_RUNTIME)
        device = self.device(tgid, abi.DEV_NONE if dev is None else dev, api, dev is not None)
        if fam == abi.FAM_LAUNCH:
            return CallKey(executable=r.executable(tgid),
                           kernel_name=r.kernel_label(tgid, sub, ident),
                           api=abi.API_NAMES.get(sub, "runtime"), pid=pid, device=device)
        if fam in (abi.FAM_GRID, abi.FAM_BLOCK, abi.FAM_WAIT, abi.FAM_WAIT_BOUND):
            return CallKey(executable=r.executable(tgid), pid=pid, device=device)
        if fam == abi.FAM_COPY:
            return CallKey(executable=r.executable(tgid),
                           memcpy_kind=abi.MEMCPY_KIND_NAMES.get(sub, "Default"), pid=pid,
                           device=device)
        if fam == abi.FAM_ALLOC:
            return CallKey(executable=r.executable(tgid),
                           api=abi.API_NAMES.get(sub & 0xFF, "runtime"),
                           memory_type=abi.MEM_NAMES.get(sub >> 8, "device"), pid=pid,
                           device=device)
        if fam == abi.FAM_ERROR:
            probe = abi.ALL_PROBES[sub] if sub < len(abi.ALL_PROBES) else None
            names = (hip_errors.HIP if probe is not None and probe.hip else
                     cuda_errors.DRIVER if probe is None or probe.driver else cuda_errors.RUNTIME)
            return CallKey(executable=r.executable(tgid),
                           call=probe.call if probe else str(sub),
                           error_type=names.get(ident, str(ident)), pid=pid, device=device)
        if fam == abi.FAM_SYNC:
            return CallKey(sync_call=abi.SYNC_NAMES.get(sub, "unknown"), pid=pid, device=device)
        if fam == abi.FAM_ELAPSED:
            return CallKey(kernel_name=r.kernel_label(tgid, sub & 0xFF, ident), pid=pid,
                           device=device)
        if fam == abi.FAM_DURATION:  # sub: api | completion << 8
            name = (OTHER if ident == abi.DURATION_OTHER_ID
                    else r.kernel_label(tgid, sub & 0xFF, ident))
            return CallKey(kernel_name=name, pid=pid, device=device,
                           completion=abi.COMPLETION_NAMES.get(sub >> 8, "sync_fallback"))
        return CallKey(pid=pid)

    def device(self, tgid: int, dev: int, api: int, by_ordinal: bool) -> str | None:
        """The device (its key: GPU or MIG UUID) of calls process `tgid` made with
        current device `dev`, by NVML's account; None when not certain. Once found it is
        kept, so a series does not change its labels.

        - A process NVML lists on exactly one device is on that device.
        - A process on several: its thread's current device ordinal (set by
          cudaSetDevice or a context made current; a runtime call of a thread that chose
          none is on ordinal 0), when the process itself was told which device that
          ordinal is (cudaGetDeviceProperties, cuDeviceGetUuid, *GetPCIBusId) and NVML
          lists the process on it. Ordinals alone are never mapped: CUDA_VISIBLE_DEVICES
          may have been changed at run time, a container numbers its own GPUs from 0,
          and CUDA orders devices fastest first by default.
        """
        cache_key = (tgid, dev, api, by_ordinal)
        found = self._devices.get(cache_key)
        if found is not None or self.nvml is None:
            return found
        listed = self.nvml.devices_of.get(tgid)
        if not listed:
            return None
        if len(listed) == 1:
            found = next(iter(listed))
        elif by_ordinal:
            ordinal = (dev - 1 if abi.DEV_NONE < dev <= abi.DEV_ORDINAL_MAX + 1 else
                       0 if dev == abi.DEV_NONE and api in (abi.API_RUNTIME, abi.API_HIP)
                       else None)
            told = None if ordinal is None else self.resolver.device_id(tgid, ordinal)
            for key in (f"GPU-{told}", f"MIG-{told}", self.nvml.by_pci.get(told or "")):
                if key in listed:
                    found = key
        if found is not None:
            self._devices[cache_key] = found
        return found
