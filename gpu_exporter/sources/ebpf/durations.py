"""Kernel duration samples from closed groups, and stream waits (issue #27). The BPF
program closes a group of launches at a completion point and sends its bound and its
kernels' launch counts on the `events` ring buffer (EV_DURATIONS, struct durations_event
in program.c): counting them there would cost the verifier too many paths. They are
counted here, in a table of our own under the keys the program's `stats` map would give
them (FAM_DURATION: one sample of the bound per launch, a histogram slot and the sum),
and the maps' reader merges that table with `stats` when it reads (maps.py), so that it
reports, folds and names them like any counter. Stream waits (EV_WAIT) likewise, under
FAM_WAIT and FAM_WAIT_BOUND, and exact kernel times (EV_ELAPSED) under FAM_ELAPSED.

Data flows one way, kernel to Python (issue #34): nothing is written back into the
kernel's maps, which cost a lookup and an update system call per slot, and the program
never counts these families itself.
"""

from __future__ import annotations

import struct
import threading
from typing import NamedTuple

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.model.ebpf_abi import slot_of

# struct ehead (type, tgid, fam = completion, sub, pad = device, id = bound ns, target),
# then tag[GROUP_KERNELS], n[GROUP_KERNELS], other
EVENT = struct.Struct(f"<IIHHIQQ{2 * abi.GROUP_KERNELS + 1}Q")
_OTHER_TAG = abi.DURATION_OTHER_ID | (abi.API_RUNTIME + 1) << 48

WAIT = struct.Struct("<IIHHIQQ")  # struct ehead: fam = bounded, pad = device, id = ns


class Key(NamedTuple):
    """A counter of the table: the fields of program.c's struct skey that the maps'
    reader reads, by the same names."""

    tgid: int
    fam: int
    sub: int
    id: int
    slot: int
    dev: int


class Durations:
    """The samples counted so far, by key. The event loop's thread adds; the maps'
    reader reads a copy and takes out (folds) the counters of exited processes. Bounded
    as `stats` is: a sample that would need a key beyond `capacity` is dropped whole, and
    counted (`dropped`, reported with the stats map's own drops)."""

    def __init__(self, capacity: int = abi.STATS_MAX) -> None:
        self.capacity = capacity
        self.dropped = 0  # samples not counted: the table full
        self._table: dict[Key, int] = {}
        self._lock = threading.Lock()

    def entries(self) -> list[tuple[Key, int]]:
        """Every counter and its count now."""
        with self._lock:
            return list(self._table.items())

    def take(self, key: Key) -> int | None:
        """A final counter taken out of the table (its process folded), or None."""
        with self._lock:
            return self._table.pop(key, None)

    def put_back(self, key: Key, n: int) -> None:
        """A counter taken out that could not be folded yet, with what was added since."""
        with self._lock:
            self._table[key] = self._table.get(key, 0) + n

    def __len__(self) -> int:
        return len(self._table)

    def _add(self, rows: list[tuple[Key, int]], samples: int) -> None:
        with self._lock:
            table = self._table
            new = sum(1 for key, _ in rows if key not in table)
            if new and len(table) + new > self.capacity:
                self.dropped += samples
                return
            for key, n in rows:
                table[key] = table.get(key, 0) + n

    def on_wait(self, raw: bytes) -> None:
        """A stream wait (EV_WAIT): counted; or the bound on the time one held its stream:
        a histogram sample."""
        _, tgid, bounded, _, dev, bound, _ = WAIT.unpack_from(raw)
        if bounded:
            self._add([(Key(tgid, abi.FAM_WAIT_BOUND, 0, 0, slot_of(bound), dev), 1),
                       (Key(tgid, abi.FAM_WAIT_BOUND, 0, 0, abi.SLOT_SUM, dev), bound)], 1)
        else:
            self._add([(Key(tgid, abi.FAM_WAIT, 0, 0, 0, dev), 1)], 1)

    def on_elapsed(self, raw: bytes) -> None:
        """cudaEventElapsedTime of a one-launch span (EV_ELAPSED): a sample of its
        kernel's exact time."""
        _, tgid, api, _, dev, ident, bits = WAIT.unpack_from(raw)
        (ms,) = struct.unpack("<f", (bits & 0xFFFFFFFF).to_bytes(4, "little"))
        if not ms >= 0:  # (NaN, negative: not a time)
            return
        ns = round(ms * 1e6)
        self._add([(Key(tgid, abi.FAM_ELAPSED, api, ident, slot_of(ns), dev), 1),
                   (Key(tgid, abi.FAM_ELAPSED, api, ident, abi.SLOT_SUM, dev), ns)], 1)

    def on_event(self, raw: bytes) -> None:
        """A closed group (EV_DURATIONS): each kernel's launches, a sample of the bound
        each. Its kernels are counted apart: one that finds the table full is dropped
        (its launches counted in `dropped`), the others still count."""
        _, tgid, completion, _, dev, bound, _, *rest = EVENT.unpack_from(raw)
        k = abi.GROUP_KERNELS
        tags, counts, other = rest[:k], rest[k:2 * k], rest[2 * k]
        slot = slot_of(bound)
        for tag, n in [*zip(tags, counts, strict=True), (_OTHER_TAG, other)]:
            if not tag or not n:
                continue
            sub = ((tag >> 48) - 1) & 0xFF | completion << 8
            ident = tag & abi.DURATION_OTHER_ID
            self._add([(Key(tgid, abi.FAM_DURATION, sub, ident, slot, dev), n),
                       (Key(tgid, abi.FAM_DURATION, sub, ident, abi.SLOT_SUM, dev),
                        bound * n)], n)
