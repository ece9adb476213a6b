"""The floor a scrape is measured against: the NVML calls that scrape made, replayed
directly through pynvml in this process, plus prometheus_client rendering the very
families that scrape produced.

The calls are recorded, not listed by hand: every `pynvml.nvml*` function is wrapped
while one scrape runs, so the floor follows whatever the collectors do (more calls, or
fewer) without this file changing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pynvml
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

# The XID listener blocks in this call on its own thread whether or not anyone scrapes:
# it is background work, not part of a scrape.
_BACKGROUND = {"nvmlEventSetWait", "nvmlEventSetWait_v2"}
_depth = threading.local()  # only outermost calls: pynvml's helpers call each other


@dataclass
class Call:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass
class Recording:
    calls: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def by_function(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.calls:
            out[c.fn.__name__] = out.get(c.fn.__name__, 0) + 1
        return out


@contextmanager
def recording_nvml() -> Iterator[Recording]:
    rec = Recording()
    originals: dict[str, Callable[..., Any]] = {}
    for name in dir(pynvml):
        fn = getattr(pynvml, name)
        if not name.startswith("nvml") or not callable(fn) or name in _BACKGROUND:
            continue
        originals[name] = fn

        def wrapper(*args: Any, __fn: Callable[..., Any] = fn, **kwargs: Any) -> Any:
            depth = getattr(_depth, "n", 0)
            if depth == 0:
                with rec.lock:
                    rec.calls.append(Call(__fn, args, kwargs))
            _depth.n = depth + 1
            try:
                return __fn(*args, **kwargs)
            finally:
                _depth.n = depth

        setattr(pynvml, name, wrapper)
    try:
        yield rec
    finally:
        for name, fn in originals.items():
            setattr(pynvml, name, fn)


def replay(calls: Sequence[Call]) -> None:
    """The recorded calls, in order, straight through pynvml; errors are what NVML
    answers (NOT_SUPPORTED for an absent value) and are part of the cost."""
    for c in calls:
        try:  # noqa: SIM105 - cheaper than contextlib.suppress, and this loop is the floor
            c.fn(*c.args, **c.kwargs)
        except pynvml.NVMLError:
            pass


class _Prebuilt(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def prebuilt_registry(families: list[Metric]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Prebuilt(families))
    return registry


def floor_scrape(calls: Sequence[Call], registry: CollectorRegistry) -> bytes:
    replay(calls)
    return generate_latest(registry)


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
