"""Kernel duration samples from closed groups, and stream waits (issue #27). The BPF
program closes a group of launches at a completion point and sends its bound and its
kernels' launch counts on the `events` ring buffer (EV_DURATIONS, struct durations_event
in program.c): counting them there would cost the verifier too many paths. They are
counted here into the same `stats` map, under FAM_DURATION, as the program counts
everything else: one sample of the bound per launch (a histogram slot and the sum), so
that the maps' reader reports, folds and names them like any counter. Stream waits
(EV_WAIT) likewise, under FAM_WAIT and FAM_WAIT_BOUND. Only this thread writes those
keys.
"""

from __future__ import annotations

import struct
from typing import Any

from gpu_exporter.model import ebpf_abi as abi

# struct ehead (type, tgid, fam = completion, sub, pad = device, id = bound ns, target),
# then tag[GROUP_KERNELS], n[GROUP_KERNELS], other
EVENT = struct.Struct(f"<IIHHIQQ{2 * abi.GROUP_KERNELS + 1}Q")
_OTHER_TAG = abi.DURATION_OTHER_ID | (abi.API_RUNTIME + 1) << 48


def slot_of(v: int) -> int:
    """program.c's slot_of: the smallest s with v <= 2**s."""
    return 0 if v <= 1 else (v - 1).bit_length()


WAIT = struct.Struct("<IIHHIQQ")  # struct ehead: fam = bounded, pad = device, id = ns


class Durations:
    def __init__(self) -> None:
        self.dropped = 0  # samples not counted: `stats` full

    def _add(self, stats: Any, key: Any, n: int) -> bool:
        try:
            old = stats[key].value
        except KeyError:
            old = 0
        try:
            stats[key] = stats.Leaf(old + n)
        except Exception:  # full: bcc raises on the failed update
            return False
        return True

    def on_wait(self, bpf: Any, raw: bytes) -> None:
        """A stream wait (EV_WAIT): counted; or the bound on the time one held its stream:
        a histogram sample."""
        _, tgid, bounded, _, dev, bound, _ = WAIT.unpack_from(raw)
        stats = bpf["stats"]
        rows = ([(abi.FAM_WAIT_BOUND, slot_of(bound), 1), (abi.FAM_WAIT_BOUND, abi.SLOT_SUM,
                                                             bound)]
                if bounded else [(abi.FAM_WAIT, 0, 1)])
        for fam, slot, n in rows:
            key = stats.Key(tgid=tgid, fam=fam, sub=0, id=0, slot=slot, dev=dev)
            if not self._add(stats, key, n):
                self.dropped += 1
                return

    def on_elapsed(self, bpf: Any, raw: bytes) -> None:
        """cudaEventElapsedTime of a one-launch span (EV_ELAPSED): a sample of its
        kernel's exact time."""
        _, tgid, api, _, dev, ident, bits = WAIT.unpack_from(raw)
        (ms,) = struct.unpack("<f", (bits & 0xFFFFFFFF).to_bytes(4, "little"))
        if not ms >= 0:  # (NaN, negative: not a time)
            return
        ns = round(ms * 1e6)
        stats = bpf["stats"]
        for slot, n in ((slot_of(ns), 1), (abi.SLOT_SUM, ns)):
            key = stats.Key(tgid=tgid, fam=abi.FAM_ELAPSED, sub=api, id=ident, slot=slot,
                            dev=dev)
            if not self._add(stats, key, n):
                self.dropped += 1
                return

    def on_event(self, bpf: Any, raw: bytes) -> None:
        _, tgid, completion, _, dev, bound, _, *rest = EVENT.unpack_from(raw)
        k = abi.GROUP_KERNELS
        tags, counts, other = rest[:k], rest[k:2 * k], rest[2 * k]
        stats = bpf["stats"]
        for tag, n in [*zip(tags, counts, strict=True), (_OTHER_TAG, other)]:
            if not tag or not n:
                continue
            sub = ((tag >> 48) - 1) & 0xFF | completion << 8
            ident = tag & abi.DURATION_OTHER_ID
            for slot, add in ((slot_of(bound), n), (abi.SLOT_SUM, bound * n)):
                key = stats.Key(tgid=tgid, fam=abi.FAM_DURATION, sub=sub, id=ident,
                                slot=slot, dev=dev)
                if not self._add(stats, key, add):
                    self.dropped += n
                    break
