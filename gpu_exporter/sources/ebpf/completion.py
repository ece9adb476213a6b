"""The completion-point state of the BPF program (issue #27: kernel durations bounded by
the application's own events and stream queries): what user space does with it. The BPF
side keeps, per process, its streams' launch groups (`streams`), its recorded events
(`cuda_events`) and its stream list (`proc_streams`); a process that exits leaves them
behind, and they are deleted here when its counters are folded."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

TABLES = ("streams", "cuda_events")  # keyed by struct gkey (tgid, handle)


def forget(bpf: Any, tgids: set[int], entries: Callable[[str], list[tuple[Any, Any]]]
           ) -> None:
    """Every completion-point entry of the exited processes `tgids` deleted."""
    if not tgids:
        return
    lists = bpf["proc_streams"]
    for tgid in tgids:
        with contextlib.suppress(KeyError):
            del lists[lists.Key(tgid)]
    for name in TABLES:
        table = bpf[name]
        for k, _ in entries(name):
            if int(k.tgid) in tgids:
                with contextlib.suppress(KeyError):
                    del table[k]
