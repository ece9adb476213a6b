"""What the sources of one scrape say, read once for every collector of that scrape:
`ScrapeInputs`, made by the scrape layer (scrape/exporter.py) for each scrape and handed
to each collector in its Sink. A part is read lazily, by the first collector that asks
for it; the others wait for that read (never past their deadline) and get the same
record. It is gone with the scrape, so nothing read for one scrape is served to another.

Today it holds the host's DRM fdinfo walk (intel, processes and eBPF's HIP device view
need it side by side)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from gpu_exporter.readers.procfs import fdinfo

T = TypeVar("T")


class _Lazy(Generic[T]):
    """`read()` run once, by the first caller; the others wait for it until their
    deadline (a time.monotonic() value; TimeoutError). Its exception is every caller's."""

    def __init__(self, read: Callable[[], T], what: str) -> None:
        self._read, self._what = read, what
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._owned = False
        self._value: T | None = None
        self._error: BaseException | None = None

    def get(self, deadline: float) -> T:
        with self._lock:
            owner, self._owned = not self._owned, True
        if owner:
            try:
                self._value = self._read()
            except BaseException as exc:
                self._error = exc
            finally:
                self._done.set()
        elif not self._done.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"{self._what}: another collector's read passed the "
                               "scrape deadline")
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set when no error


class ScrapeInputs:
    """The inputs of one scrape (see the module's docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._drm: dict[str, _Lazy[list[fdinfo.DrmClient]]] = {}

    def drm_clients(self, procfs: str, deadline: float) -> list[fdinfo.DrmClient]:
        """Every DRM client of the host (all drivers), walked once this scrape however
        many collectors ask. TimeoutError when the walk passes `deadline`, for every
        collector that asked."""
        with self._lock:
            lazy = self._drm.get(procfs)
            if lazy is None:
                lazy = self._drm[procfs] = _Lazy(
                    lambda: fdinfo.read_drm_clients(procfs, deadline=deadline),
                    "DRM fdinfo walk")
        return lazy.get(deadline)
