"""Reading the BPF maps into the typed reading (`CudaActivity`), and folding: the counts
of exited processes, and of retired executable graphs, move out of the maps into our own
totals, so that the maps do not fill up with the dead and the sums stay monotonic. An
exited process whose graph launches wait for their executable graph's event is held back
from folding (HoldBack).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.sources.ebpf import completion
from gpu_exporter.sources.ebpf.counters import STATS, Counters, Pending, launch_tag, serial
from gpu_exporter.sources.ebpf.durations import Durations, Key
from gpu_exporter.sources.ebpf.events import Polls
from gpu_exporter.sources.ebpf.graphs import Graphs
from gpu_exporter.sources.ebpf.loader import Program, scalar
from gpu_exporter.sources.ebpf.names import EXPIRY_SECONDS, OTHER
from gpu_exporter.sources.ebpf.reading import (
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
from gpu_exporter.sources.ebpf.resolve import Resolver

# A process that exited with a graph launch whose executable graph's event has not been
# read is held back (not folded) until the event loop has read every event written
# before: then the event was read, or lost and counted. This bounds the wait should the
# loop be stuck (its launches then count as unknown). So is one that exited before any
# read or event told its executable's name (a short program, read right after it ended:
# its /proc entry is gone, its first event carries its command): its counts are left out
# until then, not reported under process_executable_name="unknown" for ever.
_HOLD_SECONDS = 30.0

Totals = dict[tuple[int, CallKey, int], int]


@dataclass
class _Totals:
    """Counts folded in from processes that have exited (their map entries are freed),
    and when each series (family, key) last had a count folded in."""

    values: dict[tuple[int, CallKey, int], int] = field(default_factory=lambda: defaultdict(int))
    last: dict[tuple[int, CallKey], float] = field(default_factory=dict)


class HoldBack:
    """Exited processes not folded yet, each with (polls begun when first held, when
    first held)."""

    def __init__(self, counters: Counters, graphs: Graphs, polls: Polls) -> None:
        self.counters = counters
        self.graphs = graphs
        self.polls = polls
        self._held: dict[int, tuple[int, float]] = {}

    def forget(self, tgid: int) -> None:
        self._held.pop(tgid, None)

    def judge(self, stats: list[tuple[Any, Any]], shapes: list[tuple[int, Any]],
              alive: Callable[[int], bool]) -> set[int]:
        """Exited processes not folded this read: a launch of theirs is of an executable
        graph whose event has not been read yet: until the event loop has read what was
        written before (or for _HOLD_SECONDS at most; then their graph launches count as
        unknown)."""
        pending: set[int] = set()
        known = self.counters.resolver.knows_executable
        for k, _ in stats:
            tgid = int(k.tgid)
            if tgid not in pending and not alive(tgid) and not known(tgid):
                pending.add(tgid)
            if tgid not in pending and not alive(tgid):
                try:
                    list(self.counters.rows(tgid, k.fam, k.sub, k.id, int(k.dev), k.slot, 0))
                except Pending:
                    pending.add(tgid)
        for tgid, v in shapes:
            if tgid not in pending and not alive(tgid) and not known(tgid):
                pending.add(tgid)
            if tgid not in pending and not alive(tgid):
                try:
                    list(self.counters.shape_rows(tgid, v, strict=True))
                except Pending:
                    pending.add(tgid)
        now = time.monotonic()
        marks = {t: self._held.get(t, (self.polls.begun, now)) for t in pending}
        # Two polls begun since: one may stop at a record reserved but not yet written.
        held = {t for t, (begun, since) in marks.items()
                if self.polls.done <= begun + 1 and now - since < _HOLD_SECONDS}
        self._held = {t: marks[t] for t in held}
        for tgid in pending - held:
            self.graphs.give_up(tgid)
        return held


class MapReader:
    """Reads the BPF maps at scrape (one read at a time) and folds the exited."""

    def __init__(self, program: Program, procfs: str, counters: Counters, graphs: Graphs,
                 resolver: Resolver, polls: Polls, attached: Callable[[], list[str]],
                 expiry_seconds: float = EXPIRY_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.program = program
        self.procfs = procfs
        self.counters = counters
        self.graphs = graphs
        self.resolver = resolver
        self.attached = attached
        self.hold = HoldBack(counters, graphs, polls)
        self._retired = _Totals()
        self.expiry_seconds = expiry_seconds
        self._clock = clock
        # the samples counted in user space (durations.py), read with `stats`
        self.durations = Durations()
        self._read_lock = threading.Lock()

    @property
    def _bpf(self) -> Any:
        return self.program.bpf

    def read(self, nvml: NvmlView | None = None) -> CudaActivity:
        """Everything counted so far. `nvml`: NVML's processes this scrape, which the
        device of each call is judged by (none: no device labels this scrape)."""
        with self._read_lock:
            self.counters.nvml = nvml if nvml is not None and nvml.complete else None
            return self._read()

    def _read(self) -> CudaActivity:
        totals: Totals = defaultdict(int)
        for key, n in self._retired.values.items():
            totals[key] += n
        live: dict[int, bool] = {}

        def alive(tgid: int) -> bool:
            if tgid not in live:
                live[tgid] = os.path.exists(f"{self.procfs}/{tgid}")
            return live[tgid]

        # Retired before the counters are read: what they read of those is final.
        retired = self.graphs.retired()
        # `stats` and the counters derived in Python alike (their keys never meet: the
        # program does not count those families).
        stats: list[tuple[Any, Any]] = [*self._entries("stats"), *self.durations.entries()]
        shapes = self._shape_entries()
        held = self.hold.judge(stats, shapes, alive)

        def counted(tgid: int) -> bool:
            return tgid in held or alive(tgid)

        def nameless(tgid: int) -> bool:  # held until its executable's name is read
            return tgid in held and not self.resolver.knows_executable(tgid)

        dead_stats, dead_shapes, final_stats = [], [], []
        # What the processes still counted hold: their series and executables' labels
        # (a series of theirs is never expired, see _expire).
        live_series: set[tuple[int, CallKey]] = set()
        labels: set[str] = set()
        for k, v in stats:
            if not counted(int(k.tgid)):
                dead_stats.append(k)
                continue
            if nameless(int(k.tgid)):
                continue
            labels.add(self.resolver.executable(int(k.tgid)))
            if serial(k.fam, k.sub, k.id) in retired.get(int(k.tgid), ()):
                final_stats.append(k)
                continue
            with contextlib.suppress(Pending):  # counted at a later read
                for key, n in self.counters.counter_rows(STATS, int(k.tgid), k.fam, k.sub, k.id,
                                                 int(k.dev), k.slot, scalar(v)):
                    totals[key] += n
                    live_series.add(key[:2])
        in_slots: dict[int, set[int]] = defaultdict(set)
        for tgid, v in shapes:
            if not counted(tgid):
                dead_shapes.append(tgid)
                continue
            if nameless(tgid):
                continue
            labels.add(self.resolver.executable(tgid))
            for key, n in self.counters.shape_rows(tgid, v):
                totals[key] += n
                live_series.add(key[:2])
            for launch in v.launches:
                api, ident, _ = launch_tag(int(launch.tag))
                graph_serial = serial(abi.FAM_LAUNCH, api, ident)
                if graph_serial is not None:
                    in_slots[tgid].add(graph_serial)
        self._fold(dead_stats, dead_shapes, totals)
        self._fold_retired(final_stats, retired, in_slots, totals)
        self._expire(totals, live_series, labels)
        self.graphs.prune(counted)  # processes that made graphs but never ran one
        self._prune_captures(alive)
        return activity(totals, self._dropped(), self.attached(),
                        self.resolver.executables.folded_total)

    def _retire(self, key: tuple[int, CallKey, int], n: int, totals: Totals) -> None:
        """`n` of an exited process (or a retired graph) folded into our own totals."""
        self._retired.values[key] += n
        totals[key] += n
        series = key[:2]
        if series not in self._retired.last:
            self.resolver.executables.hold(series[1].executable)
        self._retired.last[series] = self._clock()

    def _expire(self, totals: Totals, live: set[tuple[int, CallKey]],
                labels: set[str]) -> None:
        """Drops the series of exited processes that nothing counted since
        `expiry_seconds`: the whole series goes (every bucket of a histogram), never a
        part, so no counter goes down; one a process still counted adds to, or whose
        executable's label a counted process has (its launches may be pending a graph's
        event this read), stays. Its executable's place under the cap is given back."""
        old = self._clock() - self.expiry_seconds
        gone = {series for series, at in self._retired.last.items()
                if at <= old and series not in live and series[1].executable not in labels}
        if not gone:
            return
        for key in [k for k in self._retired.values if k[:2] in gone]:
            del self._retired.values[key]
            totals.pop(key, None)
        for series in gone:
            del self._retired.last[series]
            executable = series[1].executable
            self.resolver.executables.release(executable, executable)

    def _prune_captures(self, alive: Callable[[int], bool]) -> None:
        """Captures whose process exited without ending them: no longer open (so launches
        stop looking their streams up), and the graph maps' entries of the dead freed."""
        state = self._bpf["graph_state"]
        if scalar(state[state.Key(0)]) == scalar(state[state.Key(1)]):
            return
        abandoned = 0
        live = self._bpf["live_captures"]
        for k, v in self._entries("live_captures"):
            if not alive(scalar(v)):
                with contextlib.suppress(KeyError):
                    del live[live.Key(scalar(k))]
                    abandoned += 1
        if abandoned:
            key = state.Key(1)
            state[key] = state.Leaf(scalar(state[key]) + abandoned)
        for name in ("captures", "capture_events"):
            table = self._bpf[name]
            for k, _ in self._entries(name):
                if not alive(int(k.tgid)):
                    with contextlib.suppress(KeyError):
                        del table[k]

    def _fold(self, dead_stats: list[Any], dead_shapes: list[Any],
              totals: Totals) -> None:
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
            self._retire(key, n, totals)
        completion.forget(self._bpf, tgids, self._entries)
        for tgid in tgids:
            self.resolver.forget(tgid)
            self.graphs.forget(tgid)
            self.hold.forget(tgid)
        execs = self._bpf["execs"]
        for k, _ in self._entries("execs"):
            if int(k.tgid) in tgids:
                with contextlib.suppress(KeyError):
                    del execs[k]
        self.counters.forget(tgids)

    def _fold_stats(self, keys: list[Any], totals: Totals
                    ) -> list[Any]:
        """Move final counters (of exited processes, of retired executable graphs) out of
        `stats` into our own totals; returns those moved (one whose executable graph's
        event has not been read stays)."""
        stats = self._bpf["stats"]
        moved = []
        for k in keys:
            ours = isinstance(k, Key)  # a counter of durations.py's table
            counter = (STATS, int(k.tgid), int(k.fam), int(k.sub), int(k.id),
                       int(k.dev), int(k.slot))
            try:
                # final: nothing adds to it any more (but a late sample of ours)
                n = self.durations.take(k) if ours else scalar(stats[k])
                if n is None:
                    continue
                try:
                    rows = self.counters.counter_rows(*counter, n)
                except Pending:
                    if ours:
                        self.durations.put_back(k, n)
                    raise
                if not ours:
                    del stats[k]
                self.counters.folded(counter)
            except (KeyError, Pending):
                continue
            moved.append(k)
            for key, m in rows:
                self._retire(key, m, totals)
        return moved

    def _fold_retired(self, final_stats: list[Any], retired: dict[int, set[int]],
                      in_slots: dict[int, set[int]],
                      totals: Totals) -> None:
        """The counters of retired executable graphs folded, so that updating one (a new
        serial each time) does not fill `stats`; their serials forgotten, but for those a
        launch counter of the process's shape value holds (never given up)."""
        moved = {id(k) for k in self._fold_stats(final_stats, totals)}
        left: dict[int, set[int | None]] = defaultdict(set)
        for k in final_stats:
            if id(k) not in moved:
                left[int(k.tgid)].add(serial(k.fam, k.sub, k.id))
        for tgid, serials in retired.items():
            self.graphs.forget_serials(tgid, serials - in_slots[tgid] - left[tgid])

    def _free_slot(self, tgid: int) -> list[tuple[tuple[int, CallKey, int], int]] | None:
        """The final rows of an exited process's shape value; its slot zeroed and given
        back for the next new process. None when it holds none."""
        shapes, slots = self._bpf["shapes"], self._bpf["proc_slots"]
        try:
            slot = scalar(slots[slots.Key(tgid)])
            key = shapes.Key(slot)
            v = shapes[key]
        except KeyError:
            return None
        with contextlib.suppress(KeyError):
            del slots[slots.Key(tgid)]
        if int(v.tgid) != tgid:  # not its own: nothing of it to fold or give back
            return []
        rows = list(self.counters.shape_rows(tgid, v))
        shapes[key] = shapes.Leaf()
        free = self._bpf["free_slots"]
        free.push(free.Leaf(slot))
        return rows

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
            tgid = scalar(k)
            with contextlib.suppress(KeyError):
                v = shapes[shapes.Key(scalar(slot))]
                if int(v.tgid) == tgid:  # not a slot being given out right now
                    out.append((tgid, v))
        return out

    def _dropped(self) -> dict[str, int]:
        dropped = {}
        table = self._bpf["drops"]
        for reason, name in abi.DROP_NAMES.items():
            dropped[name] = scalar(table[table.Key(reason)])
        dropped[abi.DROP_GRAPH_NODES] = self.graphs.dropped
        dropped[abi.DROP_NAME_TOO_LONG] = self.resolver.cap.too_long
        dropped[abi.DROP_NAMES[abi.DROP_STATS_FULL]] += self.durations.dropped
        return dropped


def activity(totals: Totals, dropped: dict[str, int], attached: list[str],
             executables_folded: int = 0) -> CudaActivity:
    """The typed reading of the rows counted so far (`dropped`: the drop counters by
    name; `attached`: the library files with probes; `executables_folded`: processes
    reported as process_executable_name="other")."""
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

    return CudaActivity(
        launches=out_launches,
        grid_size=family(abi.FAM_GRID, GRID_BOUNDS_LOG2),
        block_size=family(abi.FAM_BLOCK, BLOCK_BOUNDS_LOG2),
        kernel_duration_seconds=family(abi.FAM_DURATION, SECONDS_BOUNDS_LOG2_NS, 1e-9),
        copies_bytes=family(abi.FAM_COPY, BYTES_BOUNDS_LOG2),
        allocations_bytes=family(abi.FAM_ALLOC, BYTES_BOUNDS_LOG2),
        sync_duration_seconds=family(abi.FAM_SYNC, SECONDS_BOUNDS_LOG2_NS, 1e-9),
        errors=[CallCount(k, n) for k, n in sorted(errors.items(), key=lambda e: order(e[0]))],
        stream_waits=[CallCount(k, sum(slots.values())) for (f, k), slots in
                      sorted(hists.items(), key=lambda h: order(h[0][1]))
                      if f == abi.FAM_WAIT],
        stream_wait_bound_seconds=family(abi.FAM_WAIT_BOUND, SECONDS_BOUNDS_LOG2_NS, 1e-9),
        kernel_elapsed_seconds=family(abi.FAM_ELAPSED, SECONDS_BOUNDS_LOG2_NS, 1e-9),
        dropped=dropped,
        attached_libraries=attached,
        kernel_names_overflow=overflow,
        executables_folded=executables_folded,
    )
