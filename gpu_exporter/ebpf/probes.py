"""Loads the BPF program, attaches it to every CUDA library file that any process maps,
keeps doing so on an interval, and reads the aggregated maps back at scrape.

bcc is imported here, lazily: it costs about 70 MB (LLVM) and is needed only when the
collector is enabled.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from gpu_exporter.ebpf import abi
from gpu_exporter.ebpf.discovery import Candidate, FileId, Scanner
from gpu_exporter.ebpf.elf import ElfError, read_symbols
from gpu_exporter.ebpf.names import OTHER, NameCap
from gpu_exporter.ebpf.reading import (
    BLOCK_BOUNDS_LOG2,
    BYTES_BOUNDS_LOG2,
    GRID_BOUNDS_LOG2,
    SECONDS_BOUNDS_LOG2_NS,
    CallHistogram,
    CallKey,
    CudaActivity,
    Launches,
    cumulative,
)
from gpu_exporter.ebpf.resolve import Resolver

log = logging.getLogger("gpu_exporter.ebpf")

_POLL_MS = 100


def _int(x: Any) -> int:
    """A map key or value of a scalar type: batched reads give ints, others ctypes."""
    return x if isinstance(x, int) else int(x.value)


class LoadError(Exception):
    """The BPF program did not compile, load or verify."""


def program_text() -> str:
    return resources.files("gpu_exporter.ebpf").joinpath("program.c").read_text()


def load_bpf(bcc: Any) -> Any:
    try:
        return bcc.BPF(text=program_text().encode(), cflags=abi.defines())
    except Exception as exc:
        raise LoadError(f"BPF program failed to compile or load: {exc}") from exc


@dataclass
class _Totals:
    """Counts folded in from processes that have exited (their map entries are freed)."""

    values: dict[tuple[int, CallKey, int], int] = field(default_factory=lambda: defaultdict(int))


class Engine:
    def __init__(self, procfs: str, names_max: int, pid_label: bool,
                 rescan_interval: float) -> None:
        self.procfs = procfs
        self.pid_label = pid_label
        self.rescan_interval = rescan_interval
        self.resolver = Resolver(procfs, NameCap(names_max))
        self.scanner = Scanner(procfs)
        self._bpf: Any = None
        self._attached: dict[FileId, str] = {}
        self._failed: set[FileId] = set()
        self._retired = _Totals()
        self._read_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- life cycle ------------------------------------------------------------------
    def start(self, bcc: Any) -> None:
        self._bpf = load_bpf(bcc)
        for name in {p.program for p in abi.ALL_PROBES} | {"rt_ret", "drv_ret"}:
            try:
                self._bpf.load_func(name.encode(), bcc.BPF.KPROBE)
            except Exception as exc:
                self.close()
                raise LoadError(f"BPF program {name} failed to load: {exc}") from exc
        self._bpf["events"].open_ring_buffer(self._on_event)
        self.rescan()
        self._thread = threading.Thread(target=self._run, name="ebpf-events", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(30)  # a poll is 0.1 s; an attach stops at the next probe
        if self._bpf is not None:
            try:
                probes = len(self._bpf.uprobe_fds)
                self._bpf.cleanup()  # detaches every uprobe, removes its uprobe_events entry
                log.info("detached %d eBPF probes", probes)
            except Exception:
                log.exception("detaching eBPF probes")
            self._bpf = None

    def _run(self) -> None:
        next_scan = time.monotonic() + self.rescan_interval
        while not self._stop.is_set():
            try:
                self._bpf.ring_buffer_poll(_POLL_MS)
                if time.monotonic() >= next_scan:
                    self.rescan()
                    next_scan = time.monotonic() + self.rescan_interval
            except Exception:
                log.exception("eBPF event loop")
                self._stop.wait(1)

    def _on_event(self, _ctx: Any, data: Any, size: int) -> int:
        try:
            self.resolver.on_event(ctypes.string_at(data, size))
        except Exception:
            log.exception("eBPF event")
        return 0

    # -- attaching ---------------------------------------------------------------------
    def rescan(self) -> None:
        found = self.scanner.scan()
        self.resolver.known_maps = self.scanner.cuda_maps
        for file, cand in found.items():
            if file in self._attached or file in self._failed:
                continue
            self._attach(cand)

    def _attach(self, cand: Candidate) -> None:
        try:
            syms = read_symbols(cand.open_path, (p.symbol for p in abi.ALL_PROBES))
        except ElfError as exc:
            log.warning("cannot read symbols of %s (pid %d): %s", cand.path, cand.pid, exc)
            self._failed.add(cand.file)
            return
        count = 0
        try:
            for probe in abi.ALL_PROBES:
                addr = syms.functions.get(probe.symbol)
                if addr is None:
                    continue
                if self._stop.is_set():
                    return  # shutting down: close() detaches what is attached
                path = cand.open_path.encode()
                self._bpf.attach_uprobe(name=path, addr=addr, fn_name=probe.program.encode())
                if probe.returns:
                    self._bpf.attach_uretprobe(name=path, addr=addr,
                                               fn_name=probe.returns.encode())
                count += 1
        except Exception as exc:
            log.warning("cannot attach probes to %s (pid %d): %s", cand.path, cand.pid, exc)
            self._failed.add(cand.file)
            return
        if count:
            self._attached[cand.file] = cand.path
            log.info("attached %d probes to %s (pid %d)", count, cand.path, cand.pid)
        else:
            self._failed.add(cand.file)

    @property
    def attached_libraries(self) -> list[str]:
        return sorted(set(tuple(self._attached.values())))

    # -- reading ---------------------------------------------------------------------
    def _entries(self, name: str) -> list[tuple[Any, Any]]:
        table = self._bpf[name]
        try:
            return list(table.items_lookup_batch())
        except Exception:
            # Kernels without batched lookups (before 5.6).
            return list(table.items())

    def _shape_rows(self, tgid: int, v: Any) -> Iterator[tuple[tuple[int, CallKey, int], int]]:
        key = self._key(tgid, abi.FAM_GRID, 0, 0)
        for fam, slots, total in ((abi.FAM_GRID, v.grid, v.grid_sum),
                                  (abi.FAM_BLOCK, v.block, v.block_sum)):
            for slot, n in enumerate(slots):
                if n:
                    yield (fam, key, slot), int(n)
            yield (fam, key, abi.SLOT_SUM), int(total)

    def _key(self, tgid: int, fam: int, sub: int, ident: int) -> CallKey:
        r = self.resolver
        pid = tgid if self.pid_label else None
        if fam == abi.FAM_LAUNCH:
            return CallKey(executable=r.executable(tgid),
                           kernel_name=r.kernel_label(tgid, sub, ident),
                           api=abi.API_NAMES.get(sub, "runtime"), pid=pid)
        if fam in (abi.FAM_GRID, abi.FAM_BLOCK):
            return CallKey(executable=r.executable(tgid), pid=pid)
        if fam == abi.FAM_COPY:
            return CallKey(executable=r.executable(tgid),
                           memcpy_kind=abi.MEMCPY_KIND_NAMES.get(sub, "Default"), pid=pid)
        if fam == abi.FAM_ALLOC:
            return CallKey(executable=r.executable(tgid),
                           api=abi.API_NAMES.get(sub, "runtime"), pid=pid)
        if fam == abi.FAM_SYNC:
            return CallKey(sync_call=abi.SYNC_NAMES.get(sub, "unknown"), pid=pid)
        if fam == abi.FAM_DURATION:
            return CallKey(kernel_name=r.kernel_label(tgid, sub, ident), pid=pid)
        return CallKey(pid=pid)

    def read(self) -> CudaActivity:
        with self._read_lock:
            return self._read()

    def _read(self) -> CudaActivity:
        totals: dict[tuple[int, CallKey, int], int] = defaultdict(int)
        for key, n in self._retired.values.items():
            totals[key] += n
        live: dict[int, bool] = {}

        def alive(tgid: int) -> bool:
            if tgid not in live:
                live[tgid] = os.path.exists(f"{self.procfs}/{tgid}")
            return live[tgid]

        dead_stats, dead_shapes = [], []
        for k, v in self._entries("stats"):
            if not alive(int(k.tgid)):
                dead_stats.append(k)
                continue
            totals[(k.fam, self._key(int(k.tgid), k.fam, k.sub, k.id), k.slot)] += _int(v)
        for k, v in self._entries("shapes"):
            if not alive(_int(k)):
                dead_shapes.append(_int(k))
                continue
            for key, n in self._shape_rows(_int(k), v):
                totals[key] += n
        self._fold(dead_stats, dead_shapes, totals)
        self._prune_threads()
        return self._activity(totals)

    def _fold(self, dead_stats: list[Any], dead_shapes: list[Any],
              totals: dict[tuple[int, CallKey, int], int]) -> None:
        """Move the counts of exited processes out of the BPF maps into our own totals,
        so the maps do not fill up with the dead; the sums stay monotonic."""
        if not dead_stats and not dead_shapes:
            return
        tgids: set[int] = set()
        folded: list[tuple[tuple[int, CallKey, int], int]] = []
        stats = self._bpf["stats"]
        for k in dead_stats:
            try:
                n = _int(stats[k])  # final: an exited process adds no more
                del stats[k]
            except KeyError:
                continue
            tgid = int(k.tgid)
            tgids.add(tgid)
            folded.append(((int(k.fam), self._key(tgid, k.fam, k.sub, k.id), int(k.slot)), n))
        shapes = self._bpf["shapes"]
        for tgid in dead_shapes:
            key = shapes.Key(tgid)
            try:
                rows = list(self._shape_rows(tgid, shapes[key]))
                del shapes[key]
            except KeyError:
                continue
            tgids.add(tgid)
            folded.extend(rows)
        for key, n in folded:
            self._retired.values[key] += n
            totals[key] += n
        pending = self._bpf["pending"]
        for tgid in tgids:
            with contextlib.suppress(KeyError):
                del pending[pending.Key(tgid)]
            self.resolver.forget(tgid)

    def _prune_threads(self) -> None:
        """Each thread that made a probed call keeps a small entry; drop the exited."""
        threads = self._bpf["threads"]
        for k in list(threads.keys()):
            tgid, tid = _int(k) >> 32, _int(k) & 0xFFFFFFFF
            if not os.path.exists(f"{self.procfs}/{tgid}/task/{tid}"):
                with contextlib.suppress(KeyError):
                    del threads[k]

    def _activity(self, totals: dict[tuple[int, CallKey, int], int]) -> CudaActivity:
        launches: dict[CallKey, int] = defaultdict(int)
        hists: dict[tuple[int, CallKey], dict[int, int]] = defaultdict(dict)
        sums: dict[tuple[int, CallKey], int] = defaultdict(int)
        for (fam, key, slot), n in totals.items():
            if fam == abi.FAM_LAUNCH:
                launches[key] += n
            elif slot == abi.SLOT_SUM:
                sums[(fam, key)] += n
            else:
                h = hists[(fam, key)]
                h[slot] = h.get(slot, 0) + n
        out_launches = []
        overflow = 0
        for key, n in sorted(launches.items()):
            if key.kernel_name == OTHER:
                overflow += n
            out_launches.append(Launches(key.kernel_name, key.executable, key.api, key.pid, n))

        def family(fam: int, bounds: tuple[int, ...], scale: float = 1.0,
                   ) -> list[CallHistogram]:
            return [
                CallHistogram(key, cumulative(slots, sums.get((f, key), 0), bounds, scale))
                for (f, key), slots in sorted(hists.items())
                if f == fam
            ]

        dropped = {}
        table = self._bpf["drops"]
        for reason, name in abi.DROP_NAMES.items():
            dropped[name] = _int(table[table.Key(reason)])
        return CudaActivity(
            launches=out_launches,
            grid_size=family(abi.FAM_GRID, GRID_BOUNDS_LOG2),
            block_size=family(abi.FAM_BLOCK, BLOCK_BOUNDS_LOG2),
            kernel_duration_seconds=family(abi.FAM_DURATION, SECONDS_BOUNDS_LOG2_NS, 1e-9),
            copies_bytes=family(abi.FAM_COPY, BYTES_BOUNDS_LOG2),
            allocations_bytes=family(abi.FAM_ALLOC, BYTES_BOUNDS_LOG2),
            sync_duration_seconds=family(abi.FAM_SYNC, SECONDS_BOUNDS_LOG2_NS, 1e-9),
            dropped=dropped,
            attached_libraries=self.attached_libraries,
            kernel_names_overflow=overflow,
        )

