"""How NVML's answers are sorted, the one error type of the stack, and the one way to
call the newest version of a function the library has.

By NVML return code:
- NOT_SUPPORTED, FUNCTION_NOT_FOUND (an older driver), NOT_FOUND: the value is absent,
  silently: the hardware (or the driver) does not have it.
- GPU_IS_LOST, UNKNOWN: the device is lost (`DeviceLost`); the others are unaffected.
- UNINITIALIZED, DRIVER_NOT_LOADED: NVML itself is gone (`NvmlGone`, a driver
  unloaded): the session is started again.
- anything else on one value: that value is absent and a failure is reported.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pynvml

from gpu_exporter.sources.library.calls import Codes, DeviceCalls
from gpu_exporter.sources.library.calls import DeviceLost as DeviceLost

T = TypeVar("T")

ABSENT = frozenset({
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    pynvml.NVML_ERROR_NOT_FOUND,
})
LOST = frozenset({pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_UNKNOWN})
GONE = frozenset({pynvml.NVML_ERROR_UNINITIALIZED, pynvml.NVML_ERROR_DRIVER_NOT_LOADED})
# A version of a function this library does not have (or whose struct it does not know).
MISSING = frozenset({pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                     pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH})

# What the operator can do, for `doctor` and the feature states.
FIX_LIBRARY = (
    "install the NVIDIA driver's user-space library libnvidia-ml.so.1 (Debian/Ubuntu: "
    "libnvidia-ml1 / libnvidia-compute-<version>); in a container, run it with the NVIDIA "
    "runtime (docker run --gpus all, Kubernetes runtimeClassName: nvidia)")
FIX_DRIVER = ("load the NVIDIA kernel module (modprobe nvidia) and check that nvidia-smi "
              "lists the GPUs")
FIX_PERMISSION = ("give the exporter read-write access to /dev/nvidiactl and "
                  "/dev/nvidia<N> (mode 0666 by default); in a container, pass the GPUs "
                  "with the NVIDIA runtime")
FIX_MISMATCH = ("the kernel module and libnvidia-ml.so.1 come from different driver "
                "versions: reboot (or reload the module) after a driver upgrade; in a "
                "container, use the NVIDIA runtime so that the host's library is mounted")
FIX_UPDATE = "update the NVIDIA driver (its libnvidia-ml.so.1 lacks this function)"
FIX_CHECK = "check nvidia-smi and the kernel log (dmesg | grep -i nvrm) on the host"


def text(fn: Callable[..., Any], *args: Any) -> str:
    """A string NVML hands out (a name, a UUID, a version), an invalid UTF-8 byte
    replaced: pynvml decodes strictly, and a GPU whose name has a byte that is not UTF-8
    would otherwise be unreadable as a whole. pynvml's string functions are wrapped by
    `convertStrBytes` (functools.wraps): the function it wraps returns the bytes."""
    raw = getattr(fn, "__wrapped__", fn)(*args)
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


class NvmlUnavailable(Exception):
    """NVML cannot be used now: `reason` says why and `fix` what to do about it."""

    def __init__(self, reason: str, fix: str = FIX_CHECK) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fix = fix


class NvmlGone(NvmlUnavailable):
    """NVML stopped answering as a whole (driver unloaded): start the session again."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"NVML stopped answering (driver unloaded?): {reason}", FIX_DRIVER)


def init_failure(exc: pynvml.NVMLError) -> NvmlUnavailable:
    """Why nvmlInit failed, and the fix."""
    code = exc.value
    if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return NvmlUnavailable("NVML library libnvidia-ml.so.1 not found", FIX_LIBRARY)
    if code == pynvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return NvmlUnavailable("NVIDIA driver not loaded", FIX_DRIVER)
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        return NvmlUnavailable("no permission to use NVML", FIX_PERMISSION)
    if code == pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return NvmlUnavailable("NVML library and kernel driver versions differ", FIX_MISMATCH)
    return NvmlUnavailable(f"NVML initialisation failed: {exc}")


def by_name(name: str) -> Callable[..., Any] | None:
    """pynvml's function `name`, looked up at each call (so that a wrapper put in its
    place, such as the benchmarks' call recorder, sees the call); None when the
    bindings lack it."""
    if not hasattr(pynvml, name):
        return None

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(pynvml, name)(*args, **kwargs)

    call.__name__ = name
    return call


# NVML's codes sorted for the calls every library-based vendor shares
# (`sources.library.calls`): absent, lost (GPU_IS_LOST, UNKNOWN), gone.
CODES = Codes(error=pynvml.NVMLError, absent=ABSENT, lost=LOST, gone=GONE, gone_error=NvmlGone)


@dataclass
class Calls(DeviceCalls):
    """Runs NVML calls for one device and sorts their errors (module docstring)."""

    codes: Codes = CODES


class Versions:
    """The newest version of an NVML function that the library has, e.g. `…_v3`, then
    `…_v2`. A version an old driver lacks (FUNCTION_NOT_FOUND, or a struct version it
    does not know) is dropped for good on its first such answer, so a fallback costs one
    failed call, not one per scrape. When the last version is missing too, `missing`
    turns true and calls raise FUNCTION_NOT_FOUND without reaching the library."""

    def __init__(self, *versions: tuple[str, Callable[..., Any] | None]) -> None:
        self.name = versions[0][0]
        # A version the bindings themselves lack is skipped from the start.
        self._versions = [(name, fn) for name, fn in versions if fn is not None]
        self._lock = threading.Lock()  # GPUs are read on several lanes at once

    @classmethod
    def of(cls, *names: str) -> Versions:
        return cls(*((name, by_name(name)) for name in names))

    @property
    def missing(self) -> bool:
        return not self._versions

    def __call__(self, *args: Any) -> Any:
        """Raises pynvml.NVMLError, as the function does."""
        while True:
            versions = self._versions
            if not versions:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            name, fn = versions[0]
            try:
                return fn(*args)
            except pynvml.NVMLError as exc:
                last = len(versions) == 1
                if exc.value not in MISSING or (
                        last and exc.value != pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                    raise
                with self._lock:
                    if self._versions and self._versions[0][0] == name:  # not yet dropped
                        self._versions = self._versions[1:]
                if last:
                    raise

    def read(self, call: Calls, *args: Any) -> Any:
        """The value, or None with the error sorted by `call`."""
        try:
            return self(*args)
        except pynvml.NVMLError as exc:
            call.check(self.name, exc.value, exc)
            return None
