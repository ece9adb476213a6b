"""Cyclic garbage collection held off while a scrape's series are alive: they are freed
by their reference counts when the response is written, so a collection in between
finds no garbage and only walks them (docs/performance.md, "Garbage collection waits
for the end of a scrape")."""

from __future__ import annotations

import gc
import threading


class GcPause:
    """No cyclic garbage collection from the start of a scrape until its response is
    rendered. A scrape makes a tuple per series (and dicts, records) that all stay
    alive until the response is written and are then freed by their reference counts:
    a collection in the middle of it only walks live objects (0.6 ms a scrape at 1 GPU,
    2.9 ms at 64 with a full pass every few scrapes, docs/performance.md). Counted, for
    scrapes that overlap; left alone when something else turned collection off."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._ours = False  # collection was on when the first pause began

    def begin(self) -> None:
        with self._lock:
            if self._depth == 0:
                self._ours = gc.isenabled()
                gc.disable()
            self._depth += 1

    def end(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0 and self._ours:
                gc.enable()
                # The young generation's collection that the scrape made due runs now,
                # in the scrape that made it due: over what outlives the scrape (the
                # state kept for the next one), once, not over every series.
                (young, middle, _), (every, every_middle, _) = (gc.get_count(),
                                                                gc.get_threshold())
                if young > every:
                    gc.collect(1 if middle >= every_middle else 0)


# One for the process: collection is a process-wide switch.
PAUSE = GcPause()
