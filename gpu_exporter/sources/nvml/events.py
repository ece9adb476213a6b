"""XID events: one listener thread per NVML session, blocked in nvmlEventSetWait_v2,
counting critical XID errors per device and code, and keeping the code of each device's
last one (dcgm-exporter's DCGM_FI_DEV_XID_ERRORS). Counts start at zero, and no last code
is known, when the session starts. Each GPU registers itself when it is identified (on its
own discovery worker, so a GPU that hangs there delays no other); whether it could is its
`nvidia.xid` state.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from typing import Any

import pynvml

from gpu_exporter.model.features import Availability
from gpu_exporter.sources.nvml.calls import FIX_CHECK, FIX_UPDATE, GONE, LOST, NvmlGone, by_name

log = logging.getLogger("gpu_exporter.nvidia")

_wait = by_name("nvmlEventSetWait_v2")


def _address(handle: Any) -> int:
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)


class XidListener:
    WAIT_MS = 500
    # A wait that has not returned this long after its own timeout is stuck in the driver.
    STUCK_SECONDS = 5.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, dict[int, int]] = {}
        self._last: dict[str, int] = {}  # device key -> code of its last XID
        self._by_handle: dict[int, str] = {}
        self._stop = threading.Event()
        self._set: Any = None
        self._thread: threading.Thread | None = None
        self._waiting_since: float | None = None
        self.availability = Availability.enabled()  # of the event API as a whole

    def start(self) -> None:
        """Creates the event set and the thread; raises NvmlGone."""
        try:
            self._set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:
            if exc.value in GONE:
                raise NvmlGone(str(exc)) from None
            self.availability = self._api_missing(exc)
            log.info("NVIDIA XID events unavailable: %s", exc)
            return
        self._thread = threading.Thread(target=self._run, name="nvml-xid", daemon=True)
        self._thread.start()

    @staticmethod
    def _api_missing(exc: pynvml.NVMLError) -> Availability:
        if exc.value == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            return Availability.unavailable(
                "this NVML library has no event API (nvmlEventSetCreate, "
                "nvmlEventSetWait_v2): XID errors cannot be counted", FIX_UPDATE)
        return Availability.unavailable(f"NVML event set: {exc}", FIX_CHECK)

    def register(self, handle: Any, key: str) -> Availability:
        """Listens to XID events of one GPU: its `nvidia.xid` state. Raises NvmlGone."""
        if self._set is None:
            return self.availability
        try:
            pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError,
                                            self._set)
        except pynvml.NVMLError as exc:
            if exc.value in GONE:
                raise NvmlGone(str(exc)) from None
            if exc.value == pynvml.NVML_ERROR_NOT_SUPPORTED:
                return Availability.disabled(
                    "this GPU does not report XID events (NVML: Not Supported; "
                    "e.g. a vGPU guest)")
            if exc.value == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                return self._api_missing(exc)
            if exc.value in LOST:
                return Availability.unavailable(f"the GPU was lost while registering: {exc}",
                                                FIX_CHECK)
            return Availability.unavailable(
                f"registering for XID events failed: {exc}", FIX_CHECK)
        with self._lock:
            self._counts[key] = {}
            self._by_handle[_address(handle)] = key
        return Availability.enabled()

    def rename(self, handle: Any, key: str) -> None:
        """A GPU listened to is known by another key from now on (it shares its UUID with
        another GPU: `stack.distinct`); its events are counted under that key."""
        with self._lock:
            if _address(handle) in self._by_handle:
                self._by_handle[_address(handle)] = key
                self._counts[key] = {}
                self._last.pop(key, None)

    def counts(self, key: str) -> dict[int, int] | None:
        """Events counted on a device by code; None when it is not listened to."""
        with self._lock:
            counts = self._counts.get(key)
            return None if counts is None else dict(counts)

    def last(self, key: str) -> int | None:
        """The code of the last XID on a device; None before its first, or when it is not
        listened to. Held until the session ends (the exporter or NVML starts again), as
        DCGM holds its XID field's last value until its host engine restarts."""
        with self._lock:
            return self._last.get(key)

    def stuck_seconds(self) -> float:
        """How long the current wait has outlived its own timeout (0: it has not)."""
        since = self._waiting_since
        if since is None:
            return 0.0
        return max(0.0, time.monotonic() - since - self.WAIT_MS / 1000.0)

    def _run(self) -> None:
        try:
            self._listen()
        finally:
            # Only this thread frees the set: nobody else can still be waiting on it.
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlEventSetFree(self._set)

    def _listen(self) -> None:
        assert _wait is not None
        while not self._stop.is_set():
            self._waiting_since = time.monotonic()
            try:
                data = _wait(self._set, self.WAIT_MS)
            except pynvml.NVMLError as exc:
                if exc.value == pynvml.NVML_ERROR_TIMEOUT:
                    continue
                if exc.value in GONE:
                    return  # the session is started again, with a new listener
                if exc.value == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                    self.availability = self._api_missing(exc)
                    return
                log.warning("waiting for NVIDIA XID events failed: %s", exc)
                self._stop.wait(1.0)
                continue
            finally:
                self._waiting_since = None
            if not data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                continue
            with self._lock:
                key = self._by_handle.get(_address(data.device))
                if key is None:
                    continue
                xid = int(data.eventData)
                codes = self._counts[key]
                codes[xid] = codes.get(xid, 0) + 1
                self._last[key] = xid
            log.warning("XID %d on %s", xid, key)

    def stop(self, wait: float = 0.0) -> None:
        """Ends the listener within one wait period; it frees its event set itself, so
        a caller need not wait (`wait` > 0 joins, for a tidy close)."""
        self._stop.set()
        if self._thread is None:
            if self._set is not None:
                with contextlib.suppress(pynvml.NVMLError):
                    pynvml.nvmlEventSetFree(self._set)
                self._set = None
        elif wait > 0:
            self._thread.join(wait)
