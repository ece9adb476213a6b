"""The BPF program's maps as bcc presents them to Python, held in memory: each a table
with its `Key` and `Leaf` ctypes types (program.c's structs, laid out here field for
field), read by key, written, deleted, listed with items(), and the free-slot queue with
push(). The lowest layer the engine's map reading talks to, so that its reading and
folding run on contents a test writes, without bcc, root or a kernel.

Like a kernel before 5.6, the tables have no batched lookup: the reader falls back to
items(), as it does there.
"""

from __future__ import annotations

import ctypes
from typing import Any

from gpu_exporter.model import ebpf_abi as abi


class SKey(ctypes.Structure):
    """program.c: struct skey."""

    _fields_ = (("tgid", ctypes.c_uint32), ("fam", ctypes.c_uint16), ("sub", ctypes.c_uint16),
                ("id", ctypes.c_uint64), ("slot", ctypes.c_uint32), ("dev", ctypes.c_uint32))


class LSlot(ctypes.Structure):
    """program.c: struct lslot."""

    _fields_ = (("tag", ctypes.c_uint64), ("n", ctypes.c_uint64))


class Shape(ctypes.Structure):
    """program.c: struct shape."""

    _fields_ = (("grid", ctypes.c_uint64 * abi.GRID_SLOTS),
                ("block", ctypes.c_uint64 * abi.BLOCK_SLOTS),
                ("grid_sum", ctypes.c_uint64), ("block_sum", ctypes.c_uint64),
                ("epoch", ctypes.c_uint64), ("tgid", ctypes.c_uint32),
                ("pad", ctypes.c_uint32), ("launches", LSlot * abi.LAUNCH_SLOTS))


class GKey(ctypes.Structure):
    """program.c: struct gkey."""

    _fields_ = (("tgid", ctypes.c_uint32), ("pad", ctypes.c_uint32),
                ("handle", ctypes.c_uint64))


class Opaque(ctypes.Structure):
    """A value the reader only deletes (program.c: struct sstate, struct estate, struct
    plist), as far as this test needs it."""

    _fields_ = (("n", ctypes.c_uint64),)


class Table:
    """A BPF_HASH (or, with `size`, a BPF_ARRAY: every index in range reads, zero until
    written)."""

    def __init__(self, key: Any, leaf: Any, size: int | None = None) -> None:
        self.Key, self.Leaf, self.size = key, leaf, size
        self._items: dict[bytes, tuple[Any, Any]] = {}

    def _index(self, key: Any) -> bytes:
        if self.size is not None and not 0 <= key.value < self.size:
            raise KeyError(key.value)
        return bytes(key)

    def __getitem__(self, key: Any) -> Any:
        k = self._index(key)
        if k not in self._items:
            if self.size is None:
                raise KeyError(key)
            self._items[k] = (self.Key.from_buffer_copy(k), self.Leaf())
        return self._items[k][1]

    def __setitem__(self, key: Any, leaf: Any) -> None:
        k = self._index(key)
        self._items[k] = (self.Key.from_buffer_copy(k), leaf)

    def __delitem__(self, key: Any) -> None:
        if self.size is not None:
            raise KeyError("an array's entries cannot be deleted")
        del self._items[bytes(key)]

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[tuple[Any, Any]]:
        return list(self._items.values())


class Queue:
    """A BPF_QUEUE."""

    def __init__(self, leaf: Any) -> None:
        self.Leaf = leaf
        self.values: list[int] = []

    def push(self, leaf: Any) -> None:
        self.values.append(int(leaf.value))


def maps() -> dict[str, Any]:
    """The maps the engine reads and folds, empty (program.c's declarations)."""
    u32, u64 = ctypes.c_uint32, ctypes.c_uint64
    return {
        "stats": Table(SKey, u64),
        "shapes": Table(u32, Shape, size=64),
        "proc_slots": Table(u32, u32),
        "free_slots": Queue(u32),
        "streams": Table(GKey, Opaque),
        "cuda_events": Table(GKey, Opaque),
        "proc_streams": Table(u32, Opaque),
        "drops": Table(u32, u64, size=abi.DROP_REASONS),
        "captures": Table(GKey, u64),
        "capture_events": Table(GKey, u64),
        "live_captures": Table(u64, u32),
        "execs": Table(GKey, u64),
        "graph_state": Table(u32, u64, size=3),
    }
