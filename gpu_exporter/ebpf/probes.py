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
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gpu_exporter.ebpf import abi, attach, cuda_errors
from gpu_exporter.ebpf.discovery import Candidate, FileId, Scanner
from gpu_exporter.ebpf.elf import ElfError, ElfFile
from gpu_exporter.ebpf.graphs import PENDING, Graphs
from gpu_exporter.ebpf.loader import (
    TRACEPOINTS,
    LoadError,
    attach_raw_tracepoints,
    choose_mechanism,
    load_bpf,
    tracepoint_offsets,
    uprobe_programs,
)
from gpu_exporter.ebpf.names import OTHER, NameCap
from gpu_exporter.ebpf.reading import (
    BLOCK_BOUNDS_LOG2,
    BYTES_BOUNDS_LOG2,
    GRID_BOUNDS_LOG2,
    SECONDS_BOUNDS_LOG2_NS,
    CallCount,
    CallHistogram,
    CallKey,
    CudaActivity,
    Launches,
    NvmlView,
    cumulative,
    order,
)
from gpu_exporter.ebpf.resolve import Resolver

log = logging.getLogger("gpu_exporter.ebpf")

_POLL_MS = 100
# A process that exited with a graph launch whose executable graph's event has not been
# read is held back (not folded) until the event loop has read every event written
# before: then the event was read, or lost and counted. This bounds the wait should the
# loop be stuck (its launches then count as unknown).
_HOLD_SECONDS = 30.0
# A file no process maps any more is detached when this many rescans in a row have not
# found it: within two rescans of its last process exiting.
DETACH_AFTER_MISSES = 2


def _int(x: Any) -> int:
    """A map key or value of a scalar type: batched reads give ints, others ctypes."""
    return x if isinstance(x, int) else int(x.value)


Row = tuple[tuple[int, CallKey, int], int]  # ((family, key, slot), count)
# A counter of the BPF maps: (where: _STATS or _SHAPES, process, family, sub, id, device,
# slot); a launch counter of a shape value is the same as its `stats` key would be.
_Counter = tuple[int, int, int, int, int, int, int]
_STATS, _SHAPES = 0, 1


@dataclass
class _Totals:
    """Counts folded in from processes that have exited (their map entries are freed)."""

    values: dict[tuple[int, CallKey, int], int] = field(default_factory=lambda: defaultdict(int))


@dataclass
class _File:
    """A library file with probes."""

    file: FileId
    path: str  # as the first process seen mapping it saw it
    attachment: attach.Attachment
    misses: int = 0  # rescans in a row that found no process mapping it


def _launch_tag(tag: int) -> tuple[int, int, int]:
    """(api, kernel id, device) of a launch counter's tag in a shape value (struct lslot:
    id | api << 48 | device << 56)."""
    return tag >> 48 & 0xFF, tag & (1 << 48) - 1, tag >> 56


def _serial(fam: int, sub: int, ident: int) -> int | None:
    """The executable graph serial a launch counter counts by, or None."""
    if fam == abi.FAM_LAUNCH and sub == abi.API_GRAPH and ident & abi.GRAPH_SERIAL_BIT:
        return ident & ~abi.GRAPH_SERIAL_BIT
    return None


def _one_row(key: tuple[int, CallKey, int], n: int) -> list[Row]:
    return [(key, n)]


class _Pending(Exception):
    """A graph launch's executable graph: its event has not been read yet."""


class Engine:
    def __init__(self, procfs: str, names_max: int, pid_label: bool,
                 rescan_interval: float, mechanism: str = "auto") -> None:
        self.procfs = procfs
        self.pid_label = pid_label
        self.rescan_interval = rescan_interval
        self.wanted_mechanism = mechanism
        self.resolver = Resolver(procfs, NameCap(names_max))
        self.scanner = Scanner(procfs)
        self._bpf: Any = None
        self._mech: attach.Mechanism | None = None
        self.mechanism_problem: str | None = None  # why uprobe_multi is not used
        self.tracking_problem: str | None = None  # why exec/mmap tracking is off
        self._tracepoint_fds: list[int] = []
        self._files: dict[FileId, _File] = {}
        self._failed: set[FileId] = set()
        self._files_lock = threading.Lock()
        self._detaching: dict[FileId, Future[None]] = {}
        self._detacher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ebpf-detach")
        self._to_scan: set[int] = set()
        self._sighted: set[int] = set()  # processes whose maps were read at their first event
        self._retired = _Totals()
        self._nvml: NvmlView | None = None  # for the read under way
        self._devices: dict[tuple[int, int, int, bool], str] = {}
        # What each counter had counted when last read with no device known: it stays in
        # the device-less series once the device is known (see _split).
        self._undeviced: dict[_Counter, int] = {}
        self.graphs = Graphs()
        self._graph_drops = 0  # graph events lost, as last read out (_read_out)
        self._graph_drops_seen = 0  # ... as the last graph record read said (or more)
        # Exited processes not folded yet: (polls begun when first held, when first held).
        self._held: dict[int, tuple[int, float]] = {}
        self._polls_begun = 0
        self._polled = 0  # the last poll begun that returned: events before it are read
        self._read_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def mechanism(self) -> str:
        return self._mech.name if self._mech is not None else ""

    # -- life cycle ------------------------------------------------------------------
    def start(self, bcc: Any) -> None:
        offsets, self.tracking_problem = tracepoint_offsets()
        self._bpf = load_bpf(bcc, offsets)
        try:
            name, self.mechanism_problem = choose_mechanism(self.wanted_mechanism)
            self._mech = attach.mechanism(name, self._bpf, bcc)
            try:
                self._mech.load(uprobe_programs())
            except Exception as exc:
                raise LoadError(f"BPF program failed to load: {exc}") from exc
            self._tracepoint_fds += attach_raw_tracepoints(self._bpf, bcc)
            self._bpf["events"].open_ring_buffer(self._on_event)
            self._bpf["procs"].open_ring_buffer(self._on_proc_event)
            if self.tracking_problem is None:
                self._attach_tracepoints(bcc)
        except BaseException:
            self.close()
            raise
        log.info("eBPF probes attach through %s%s", name,
                 f" ({self.mechanism_problem})" if self.mechanism_problem else "")
        self.rescan()
        self._thread = threading.Thread(target=self._run, name="ebpf-events", daemon=True)
        self._thread.start()

    def _attach_tracepoints(self, bcc: Any) -> None:
        from bcc.libbcc import lib

        for category, event, program, _ in TRACEPOINTS:
            try:
                fd = self._bpf.load_func(program.encode(), bcc.BPF.TRACEPOINT).fd
            except Exception as exc:
                raise LoadError(f"BPF program {program} failed to load: {exc}") from exc
            tp = lib.bpf_attach_tracepoint(fd, category.encode(), event.encode())
            if tp < 0:
                self.tracking_problem = f"cannot attach to tracepoint {category}:{event}"
                return
            self._tracepoint_fds.append(tp)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(30)  # a poll is 0.1 s; an attach stops at the next probe
        self._detacher.shutdown(wait=True)
        if self._bpf is None:
            return
        started = time.monotonic()
        with self._files_lock:
            files, self._files = list(self._files.values()), {}
        probes = sum(f.attachment.probes for f in files)
        try:
            if self._mech is not None:
                self._mech.detach(f.attachment for f in files)
            attach.close_all(self._tracepoint_fds, os.close)
            self._tracepoint_fds = []
            self._bpf.cleanup()
            log.info("detached %d eBPF probes from %d files in %.1f s", probes, len(files),
                     time.monotonic() - started)
        except Exception:
            log.exception("detaching eBPF probes")
        self._bpf = None

    def _run(self) -> None:
        next_scan = time.monotonic() + self.rescan_interval
        while not self._stop.is_set():
            try:
                self.pump(min(_POLL_MS, max(0, int((next_scan - time.monotonic()) * 1000))))
                if time.monotonic() >= next_scan:
                    self.rescan()
                    next_scan = time.monotonic() + self.rescan_interval
            except Exception:
                log.exception("eBPF event loop")
                self._stop.wait(1)

    def pump(self, wait_ms: int) -> None:
        """One turn of the event loop: reads the events written so far, waiting up to
        `wait_ms` for one, then probes what the processes they name mapped. The ring
        buffers are read until empty, so a turn begun after an event was written returns
        having read it, or counted it lost."""
        self._polls_begun += 1
        begun = self._polls_begun
        self._bpf.ring_buffer_poll(wait_ms)
        self._read_out()
        self._polled = begun
        self._scan_asked()

    def _on_event(self, _ctx: Any, data: Any, size: int) -> int:
        try:
            raw = ctypes.string_at(data, size)
            # Every record starts as a graph record's does (struct ehead).
            etype, tgid, _, _, lost, _, _ = abi.GRAPH_EVENT.unpack_from(raw)
            if tgid not in self._sighted:
                self._sight(tgid)
            if etype in abi.GRAPH_EVENTS:
                if lost != self._graph_drops_seen & 0xFFFFFFFF:
                    self._graph_events_lost_before(lost)
                node = self.graphs.on_event(raw)
                if node is not None:  # named after the names read before it
                    self.resolver.want_name(*node)
            else:
                self.resolver.on_event(raw)
        except Exception:
            log.exception("eBPF event")
        return 0

    def _sight(self, tgid: int) -> None:
        """A process's first event: its maps are read now, in the order of its events,
        while it most likely still runs, so that its kernels can be named after it exits.
        The scans the loop does between reads come too late for a short-lived process
        whose events keep coming: libbpf reads a ring buffer until no new record arrives,
        so a burst is read out (and named) only after it ends."""
        self._sighted.add(tgid)
        for pid, maps in self.scanner.scan_pid(tgid).cuda_maps.items():
            self.resolver.remember(pid, maps)

    def _graph_events_lost_before(self, lost: int) -> None:
        """A graph record saying how many graph records were lost before it (low 32
        bits): if more than known, what was being built is not known whole, from this
        record on (see Graphs.building_lost). Which executable graphs' records were lost
        is known only once every record written before the loss was counted has been
        read (_read_out)."""
        more = (lost - self._graph_drops_seen) & 0xFFFFFFFF
        if 0 < more < 1 << 31:  # (above: a record written before one already read)
            self._graph_drops_seen += more
            self.graphs.building_lost()

    def _read_out(self) -> None:
        """After a poll: the graph events lost so far and the last serial given, then
        every record written before them read; only then, if graph events were lost,
        executable graphs given a serial up to it whose record was not read are unknown
        (Graphs.serials_lost), and what was being built too unless a record read since
        said so (none came after the loss). A poll may return before reading a record
        written before it (a signal interrupts its wait: a stopped and continued
        exporter): judged by a loss counted before it was read, every graph read after
        would be unknown."""
        drops = self._bpf["drops"]
        lost = _int(drops[drops.Key(abi.DROP_GRAPH_EVENTS_FULL)])
        state = self._bpf["graph_state"]
        serial = _int(state[state.Key(2)])
        self._bpf.ring_buffer_consume()
        if lost > self._graph_drops:
            self._graph_drops = lost
            if lost > self._graph_drops_seen:
                self._graph_drops_seen = lost
                self.graphs.building_lost()
            self.graphs.serials_lost(serial)

    def _on_proc_event(self, _ctx: Any, data: Any, size: int) -> int:
        _, tgid = abi.PROC_EVENT.unpack(ctypes.string_at(data, abi.PROC_EVENT.size))
        self._to_scan.add(tgid)
        return 0

    # -- attaching ---------------------------------------------------------------------
    def _scan_asked(self) -> None:
        """The processes that exec'd or mapped a file since the last look: their new
        CUDA files are probed now; then the launches they made are named."""
        while self._to_scan and not self._stop.is_set():
            pid = self._to_scan.pop()
            found = self.scanner.scan_pid(pid)
            for p, maps in found.cuda_maps.items():
                self.resolver.remember(p, maps)
            self._attach_new(found.cuda_files.values())
        self.resolver.name_new_keys()

    def _between_pids(self) -> None:
        if self._to_scan and self._bpf is not None:
            self._scan_asked()

    def rescan(self) -> None:
        """Every process: probe new files, detach the files nobody maps any more."""
        if self._bpf is not None and self._thread is threading.current_thread():
            self._bpf.ring_buffer_consume()
        found = self.scanner.scan(between=self._between_pids)
        for pid, maps in found.cuda_maps.items():
            self.resolver.remember(pid, maps)
        self._attach_new(found.cuda_files.values())
        self._detach_unmapped(set(found.cuda_files))
        self.resolver.prune(lambda pid: os.path.exists(f"{self.procfs}/{pid}"))
        self._sighted = {t for t in self._sighted if os.path.exists(f"{self.procfs}/{t}")}
        self.resolver.name_new_keys()

    def _attach_new(self, cands: Iterable[Candidate]) -> None:
        for cand in cands:
            with self._files_lock:
                known = self._files.get(cand.file)
                if known is not None:
                    known.misses = 0
                    continue
                leaving = self._detaching.get(cand.file)
            if cand.file in self._failed or self._stop.is_set():
                continue
            if leaving is not None:
                leaving.result()  # mapped again while its old probes go: never both at once
            self._attach(cand)

    def _attach(self, cand: Candidate) -> None:
        assert self._mech is not None
        try:
            elf = ElfFile.open(cand.open_path)
            points = []
            for probe_symbol, address in elf.functions(p.symbol for p in abi.ALL_PROBES).items():
                probe = abi.BY_SYMBOL[probe_symbol]
                offset = elf.offset_of_vaddr(address)
                if offset is None:
                    continue
                cookie = abi.cookie(abi.INDEX[probe_symbol])
                points.append(attach.Point(offset, probe.program, False, cookie))
                points.append(attach.Point(offset, abi.return_program(probe), True, cookie))
        except ElfError as exc:
            self._attach_failed(cand, "cannot read symbols of", exc)
            return
        if not points:
            self._failed.add(cand.file)
            return
        try:
            attachment = self._mech.attach(cand.open_path, points)
        except attach.AttachError as exc:
            self._attach_failed(cand, "cannot attach probes to", exc)
            return
        with self._files_lock:
            self._files[cand.file] = _File(cand.file, cand.path, attachment)
        log.info("attached %d probes to %s (pid %d)", attachment.probes, cand.path, cand.pid)

    def _attach_failed(self, cand: Candidate, what: str, exc: Exception) -> None:
        """A file that cannot be probed is not tried again (said once). But when the path
        it was opened by is gone (the process whose /proc/<pid>/map_files link it was
        exited meanwhile: a short-lived program), the next scan tries again through
        another process that maps it."""
        if not os.path.exists(cand.open_path):
            log.debug("%s %s: pid %d exited meanwhile (%s); tried again at the next scan",
                      what, cand.path, cand.pid, exc)
            return
        log.warning("%s %s (pid %d): %s", what, cand.path, cand.pid, exc)
        self._failed.add(cand.file)

    def _detach_unmapped(self, mapped: set[FileId]) -> None:
        gone: list[_File] = []
        with self._files_lock:
            for file_id, f in list(self._files.items()):
                if file_id in mapped:
                    f.misses = 0
                    continue
                f.misses += 1
                if f.misses >= DETACH_AFTER_MISSES:
                    gone.append(self._files.pop(file_id))
            if not gone:
                return
            job = self._detacher.submit(self._detach, gone)
            for file_id in {f.file for f in gone}:
                self._detaching[file_id] = job

    def _detach(self, gone: list[_File]) -> None:
        """In the background: closing links waits for the kernel (tens of ms), and new
        processes should not wait for that to be probed."""
        assert self._mech is not None
        try:
            self._mech.detach(f.attachment for f in gone)
            for f in gone:
                log.info("detached %d probes from %s (no process maps it)",
                         f.attachment.probes, f.path)
        except Exception:
            log.exception("detaching eBPF probes")
        finally:
            with self._files_lock:
                for f in gone:
                    self._detaching.pop(f.file, None)

    @property
    def attached_libraries(self) -> list[str]:
        with self._files_lock:
            return sorted({f.path for f in self._files.values()})

    # -- reading ---------------------------------------------------------------------
    def _entries(self, name: str) -> list[tuple[Any, Any]]:
        table = self._bpf[name]
        try:
            return list(table.items_lookup_batch())
        except Exception:
            # Kernels without batched lookups (before 5.6).
            return list(table.items())

    def _shape_entries(self) -> list[tuple[int, Any]]:
        """(process, shape value) of every process holding a slot of `shapes`."""
        shapes = self._bpf["shapes"]
        out = []
        for k, slot in self._entries("proc_slots"):
            tgid = _int(k)
            with contextlib.suppress(KeyError):
                v = shapes[shapes.Key(_int(slot))]
                if int(v.tgid) == tgid:  # not a slot being given out right now
                    out.append((tgid, v))
        return out

    def _shape_rows(self, tgid: int, v: Any, strict: bool = False) -> Iterator[Row]:
        """A process's shape value: its grid and block histograms, and the launch counters
        kept there (see struct lslot); a counter of a graph whose event has not been read
        is left out (`strict`: raises _Pending, and only that is of use)."""
        key = self._key(tgid, abi.FAM_GRID, 0, 0)
        for fam, slots, total in ((abi.FAM_GRID, v.grid, v.grid_sum),
                                  (abi.FAM_BLOCK, v.block, v.block_sum)):
            for slot, n in [*enumerate(slots), (abi.SLOT_SUM, total)]:
                if n or slot == abi.SLOT_SUM:
                    yield from self._split((_SHAPES, tgid, fam, 0, 0, 0, slot),
                                           partial(_one_row, (fam, key, slot)), int(n))
        for launch in v.launches:
            tag, n = int(launch.tag), int(launch.n)
            if not tag:
                continue
            api, ident, dev = _launch_tag(tag)
            try:
                yield from self._counter_rows(_SHAPES, tgid, abi.FAM_LAUNCH, api, ident, dev,
                                              0, n)
            except _Pending:
                if strict:
                    raise

    def _counter_rows(self, where: int, tgid: int, fam: int, sub: int, ident: int, dev: int,
                      slot: int, n: int) -> list[Row]:
        """The rows of one BPF counter that has counted `n` (see _rows and _split)."""
        return self._split((where, tgid, fam, sub, ident, dev, slot),
                           lambda m: list(self._rows(tgid, fam, sub, ident, dev, slot, m)), n)

    def _split(self, counter: _Counter, rows: Callable[[int], list[Row]], n: int) -> list[Row]:
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

    def _rows(self, tgid: int, fam: int, sub: int, ident: int, dev: int, slot: int, n: int,
              ) -> Iterator[tuple[tuple[int, CallKey, int], int]]:
        """The rows one BPF counter makes: itself, or for the launches of an executable
        graph whose kernels are known, one per kernel node (n times each). Raises
        _Pending while its graph's event may still be on the way."""
        serial = _serial(fam, sub, ident)
        if serial is not None:
            kernels = self.graphs.kernels(tgid, serial)
            if kernels is PENDING:
                raise _Pending(tgid)
            if isinstance(kernels, Counter):
                graph = self._key(tgid, fam, sub, ident, dev)
                label = self.resolver.kernel_label
                for (api, kernel), times in kernels.items():
                    yield ((fam, graph._replace(kernel_name=label(tgid, api, kernel)), slot),
                           n * times)
                return
        yield (fam, self._key(tgid, fam, sub, ident, dev), slot), n

    def _key(self, tgid: int, fam: int, sub: int, ident: int, dev: int | None = None,
             ) -> CallKey:
        """What a counter of the BPF maps is reported by. `dev`: the calling thread's
        device (struct skey.dev); None for what is kept per process (launch shapes)."""
        r = self.resolver
        pid = tgid if self.pid_label else None
        api = sub & 0xFF if fam in (abi.FAM_LAUNCH, abi.FAM_ALLOC, abi.FAM_DURATION) else (
            abi.API_DRIVER if fam == abi.FAM_ERROR and sub < len(abi.ALL_PROBES)
            and abi.ALL_PROBES[sub].driver else abi.API_RUNTIME)
        device = self._device(tgid, abi.DEV_NONE if dev is None else dev, api, dev is not None)
        if fam == abi.FAM_LAUNCH:
            return CallKey(executable=r.executable(tgid),
                           kernel_name=r.kernel_label(tgid, sub, ident),
                           api=abi.API_NAMES.get(sub, "runtime"), pid=pid, device=device)
        if fam in (abi.FAM_GRID, abi.FAM_BLOCK):
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
            names = cuda_errors.DRIVER if probe is None or probe.driver else cuda_errors.RUNTIME
            return CallKey(executable=r.executable(tgid),
                           call=probe.call if probe else str(sub),
                           error_type=names.get(ident, str(ident)), pid=pid, device=device)
        if fam == abi.FAM_SYNC:
            return CallKey(sync_call=abi.SYNC_NAMES.get(sub, "unknown"), pid=pid, device=device)
        if fam == abi.FAM_DURATION:
            return CallKey(kernel_name=r.kernel_label(tgid, sub, ident), pid=pid, device=device)
        return CallKey(pid=pid)

    def _device(self, tgid: int, dev: int, api: int, by_ordinal: bool) -> str | None:
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
        if found is not None or self._nvml is None:
            return found
        listed = self._nvml.devices_of.get(tgid)
        if not listed:
            return None
        if len(listed) == 1:
            found = next(iter(listed))
        elif by_ordinal:
            ordinal = (dev - 1 if abi.DEV_NONE < dev <= abi.DEV_ORDINAL_MAX + 1 else
                       0 if dev == abi.DEV_NONE and api == abi.API_RUNTIME else None)
            told = None if ordinal is None else self.resolver.device_id(tgid, ordinal)
            for key in (f"GPU-{told}", f"MIG-{told}", self._nvml.by_pci.get(told or "")):
                if key in listed:
                    found = key
        if found is not None:
            self._devices[cache_key] = found
        return found

    def read(self, nvml: NvmlView | None = None) -> CudaActivity:
        """Everything counted so far. `nvml`: NVML's processes this scrape, which the
        device of each call is judged by (none: no device labels this scrape)."""
        with self._read_lock:
            self._nvml = nvml if nvml is not None and nvml.complete else None
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

        # Retired before the counters are read: what they read of those is final.
        retired = self.graphs.retired()
        stats, shapes = self._entries("stats"), self._shape_entries()
        held = self._held_back(stats, shapes, alive)

        def counted(tgid: int) -> bool:
            return tgid in held or alive(tgid)

        dead_stats, dead_shapes, final_stats = [], [], []
        for k, v in stats:
            if not counted(int(k.tgid)):
                dead_stats.append(k)
                continue
            if _serial(k.fam, k.sub, k.id) in retired.get(int(k.tgid), ()):
                final_stats.append(k)
                continue
            with contextlib.suppress(_Pending):  # counted at a later read
                for key, n in self._counter_rows(_STATS, int(k.tgid), k.fam, k.sub, k.id,
                                                 int(k.dev), k.slot, _int(v)):
                    totals[key] += n
        in_slots: dict[int, set[int]] = defaultdict(set)
        for tgid, v in shapes:
            if not counted(tgid):
                dead_shapes.append(tgid)
                continue
            for key, n in self._shape_rows(tgid, v):
                totals[key] += n
            for launch in v.launches:
                api, ident, _ = _launch_tag(int(launch.tag))
                serial = _serial(abi.FAM_LAUNCH, api, ident)
                if serial is not None:
                    in_slots[tgid].add(serial)
        self._fold(dead_stats, dead_shapes, totals)
        self._fold_retired(final_stats, retired, in_slots, totals)
        self.graphs.prune(counted)  # processes that made graphs but never ran one
        self._prune_captures(alive)
        return self._activity(totals)

    def _held_back(self, stats: list[tuple[Any, Any]], shapes: list[tuple[int, Any]],
                   alive: Callable[[int], bool]) -> set[int]:
        """Exited processes not folded this read: a launch of theirs is of an executable
        graph whose event has not been read yet: until the event loop has read what was
        written before (or for _HOLD_SECONDS at most; then their graph launches count as
        unknown)."""
        pending: set[int] = set()
        for k, _ in stats:
            tgid = int(k.tgid)
            if tgid not in pending and not alive(tgid):
                try:
                    list(self._rows(tgid, k.fam, k.sub, k.id, int(k.dev), k.slot, 0))
                except _Pending:
                    pending.add(tgid)
        for tgid, v in shapes:
            if tgid not in pending and not alive(tgid):
                try:
                    list(self._shape_rows(tgid, v, strict=True))
                except _Pending:
                    pending.add(tgid)
        now = time.monotonic()
        marks = {t: self._held.get(t, (self._polls_begun, now)) for t in pending}
        # Two polls begun since: one may stop at a record reserved but not yet written.
        held = {t for t, (begun, since) in marks.items()
                if self._polled <= begun + 1 and now - since < _HOLD_SECONDS}
        self._held = {t: marks[t] for t in held}
        for tgid in pending - held:
            self.graphs.give_up(tgid)
        return held

    def _prune_captures(self, alive: Callable[[int], bool]) -> None:
        """Captures whose process exited without ending them: no longer open (so launches
        stop looking their streams up), and the graph maps' entries of the dead freed."""
        state = self._bpf["graph_state"]
        if _int(state[state.Key(0)]) == _int(state[state.Key(1)]):
            return
        abandoned = 0
        live = self._bpf["live_captures"]
        for k, v in self._entries("live_captures"):
            if not alive(_int(v)):
                with contextlib.suppress(KeyError):
                    del live[live.Key(_int(k))]
                    abandoned += 1
        if abandoned:
            key = state.Key(1)
            state[key] = state.Leaf(_int(state[key]) + abandoned)
        for name in ("captures", "capture_events"):
            table = self._bpf[name]
            for k, _ in self._entries(name):
                if not alive(int(k.tgid)):
                    with contextlib.suppress(KeyError):
                        del table[k]

    def _fold(self, dead_stats: list[Any], dead_shapes: list[Any],
              totals: dict[tuple[int, CallKey, int], int]) -> None:
        """Move the counts of exited processes out of the BPF maps into our own totals,
        so the maps do not fill up with the dead; the sums stay monotonic."""
        if not dead_stats and not dead_shapes:
            return
        tgids = {int(k.tgid) for k in self._fold_stats(dead_stats, totals)}
        folded: list[tuple[tuple[int, CallKey, int], int]] = []
        for tgid in dead_shapes:
            rows = self._free_slot(tgid)
            if rows is not None:
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
            self.graphs.forget(tgid)
            self._held.pop(tgid, None)
        execs = self._bpf["execs"]
        for k, _ in self._entries("execs"):
            if int(k.tgid) in tgids:
                with contextlib.suppress(KeyError):
                    del execs[k]
        for cached in [k for k in self._devices if k[0] in tgids]:
            del self._devices[cached]
        for counter in [c for c in self._undeviced if c[1] in tgids]:
            del self._undeviced[counter]

    def _fold_stats(self, keys: list[Any], totals: dict[tuple[int, CallKey, int], int]
                    ) -> list[Any]:
        """Move final counters (of exited processes, of retired executable graphs) out of
        `stats` into our own totals; returns those moved (one whose executable graph's
        event has not been read stays)."""
        stats = self._bpf["stats"]
        moved = []
        for k in keys:
            try:
                n = _int(stats[k])  # final: nothing adds to it any more
                counter = (_STATS, int(k.tgid), int(k.fam), int(k.sub), int(k.id),
                           int(k.dev), int(k.slot))
                rows = self._counter_rows(*counter, n)
                del stats[k]
                self._undeviced.pop(counter, None)
            except (KeyError, _Pending):
                continue
            moved.append(k)
            for key, m in rows:
                self._retired.values[key] += m
                totals[key] += m
        return moved

    def _fold_retired(self, final_stats: list[Any], retired: dict[int, set[int]],
                      in_slots: dict[int, set[int]],
                      totals: dict[tuple[int, CallKey, int], int]) -> None:
        """The counters of retired executable graphs folded, so that updating one (a new
        serial each time) does not fill `stats`; their serials forgotten, but for those a
        launch counter of the process's shape value holds (never given up)."""
        moved = {id(k) for k in self._fold_stats(final_stats, totals)}
        left: dict[int, set[int | None]] = defaultdict(set)
        for k in final_stats:
            if id(k) not in moved:
                left[int(k.tgid)].add(_serial(k.fam, k.sub, k.id))
        for tgid, serials in retired.items():
            self.graphs.forget_serials(tgid, serials - in_slots[tgid] - left[tgid])

    def _free_slot(self, tgid: int) -> list[tuple[tuple[int, CallKey, int], int]] | None:
        """The final rows of an exited process's shape value; its slot zeroed and given
        back for the next new process. None when it holds none."""
        shapes, slots = self._bpf["shapes"], self._bpf["proc_slots"]
        try:
            slot = _int(slots[slots.Key(tgid)])
            key = shapes.Key(slot)
            v = shapes[key]
        except KeyError:
            return None
        with contextlib.suppress(KeyError):
            del slots[slots.Key(tgid)]
        if int(v.tgid) != tgid:  # not its own: nothing of it to fold or give back
            return []
        rows = list(self._shape_rows(tgid, v))
        shapes[key] = shapes.Leaf()
        free = self._bpf["free_slots"]
        free.push(free.Leaf(slot))
        return rows

    def _activity(self, totals: dict[tuple[int, CallKey, int], int]) -> CudaActivity:
        launches: dict[CallKey, int] = defaultdict(int)
        errors: dict[CallKey, int] = defaultdict(int)
        hists: dict[tuple[int, CallKey], dict[int, int]] = defaultdict(dict)
        sums: dict[tuple[int, CallKey], int] = defaultdict(int)
        for (fam, key, slot), n in totals.items():
            if fam == abi.FAM_LAUNCH:
                launches[key] += n
            elif fam == abi.FAM_ERROR:
                errors[key] += n
            elif slot == abi.SLOT_SUM:
                sums[(fam, key)] += n
            else:
                h = hists[(fam, key)]
                h[slot] = h.get(slot, 0) + n
        out_launches = []
        overflow = 0
        for key, n in sorted(launches.items(), key=lambda kv: order(kv[0])):
            if key.kernel_name == OTHER:
                overflow += n
            out_launches.append(Launches(key.kernel_name, key.executable, key.api, key.pid, n,
                                         key.device))

        def family(fam: int, bounds: tuple[int, ...], scale: float = 1.0,
                   ) -> list[CallHistogram]:
            return [
                CallHistogram(key, cumulative(slots, sums.get((f, key), 0), bounds, scale))
                for (f, key), slots in sorted(hists.items(), key=lambda h: order(h[0][1]))
                if f == fam
            ]

        dropped = {}
        table = self._bpf["drops"]
        for reason, name in abi.DROP_NAMES.items():
            dropped[name] = _int(table[table.Key(reason)])
        dropped[abi.DROP_GRAPH_NODES] = self.graphs.dropped
        return CudaActivity(
            launches=out_launches,
            grid_size=family(abi.FAM_GRID, GRID_BOUNDS_LOG2),
            block_size=family(abi.FAM_BLOCK, BLOCK_BOUNDS_LOG2),
            kernel_duration_seconds=family(abi.FAM_DURATION, SECONDS_BOUNDS_LOG2_NS, 1e-9),
            copies_bytes=family(abi.FAM_COPY, BYTES_BOUNDS_LOG2),
            allocations_bytes=family(abi.FAM_ALLOC, BYTES_BOUNDS_LOG2),
            sync_duration_seconds=family(abi.FAM_SYNC, SECONDS_BOUNDS_LOG2_NS, 1e-9),
            errors=[CallCount(k, n) for k, n in sorted(errors.items(), key=lambda e: order(e[0]))],
            dropped=dropped,
            attached_libraries=self.attached_libraries,
            kernel_names_overflow=overflow,
        )

