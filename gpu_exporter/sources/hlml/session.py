"""One HLML session for the process: the binding imported, libhlml.so loaded from a
path of our choosing, hlml_init ... hlml_shutdown, and a handle per PCI address.

The path: pyhlml's `hlmlInit()` builds `LibHLML()` with no argument, which dlopens the
absolute path /usr/lib/habanalabs/libhlml.so (LD_LIBRARY_PATH cannot move an absolute
path). The session does what `hlmlInit()` does, itself: it constructs `LibHLML(path)`
(the constructor has taken the path since 1.10, the oldest release supported), installs
it as the module's `_hlmlOBJ`, which every pyhlml function reads, and calls `hlml_init`
through it. The default path is the one the binding would use.

Quiet: `LibHLML` prints "Failed to load libhlml" to standard output when dlopen fails,
which would corrupt `dump`. The library is dlopened with ctypes first, so that a missing
or broken library is found (with the loader's own message) before `LibHLML` sees it.

Handles: up to 1.2x the binding's `HLML_DEVICE.TYPE` is one shared `c_void_p` instance
that every `hlmlDeviceGetHandleBy*` call writes into, so every handle it returns is the
same object; each is copied at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import threading
import warnings
from importlib import metadata
from types import ModuleType
from typing import Any

from gpu_exporter.sources.library.calls import Codes

DEFAULT_LIBRARY = "/usr/lib/habanalabs/libhlml.so"
# The releases of habana-pyhlml tested (both ends: tests/gaudi/test_bindings.py).
SUPPORTED = ">=1.10,<1.25"

FIX_BINDING = ("install the exporter's Gaudi extra (pip install 'gpu-exporter[gaudi]', which "
               "brings Habana's binding habana-pyhlml)")
FIX_LIBRARY = ("install the Habana driver's HLML (libhlml.so, installed with hl-smi by "
               "Habana's habanalabs-firmware-tools package into /usr/lib/habanalabs/), or "
               "point --gaudi.hlml-library at libhlml.so; in a container, mount it from the "
               "host")
FIX_DRIVER = ("load the habanalabs kernel module (modprobe habanalabs) and check that hl-smi "
              "lists the devices")
FIX_CHECK = "check hl-smi and the kernel log (dmesg | grep -i habanalabs) on the host"

# HLML_RETURN (the same values in every release of the binding)
SUCCESS = 0
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
AIP_IS_LOST = 15
NO_DATA = 21
UNKNOWN = 49


class HlmlUnavailable(Exception):
    """HLML cannot be used now: `reason` says why and `fix` what to do about it."""

    def __init__(self, reason: str, fix: str = FIX_CHECK) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fix = fix


class HlmlGone(HlmlUnavailable):
    """HLML stopped answering as a whole (driver unloaded): start the session again."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"HLML stopped answering (driver unloaded?): {reason}", FIX_DRIVER)


def binding() -> ModuleType:
    """The binding's module of functions (`pyhlml.main`); HlmlUnavailable without it."""
    try:
        with warnings.catch_warnings():  # 1.2x's main imports its own deprecated module
            warnings.simplefilter("ignore", DeprecationWarning)
            return importlib.import_module("pyhlml.main")  # the optional dependency
    except ImportError as exc:
        raise HlmlUnavailable(f"Habana's binding habana-pyhlml is not installed ({exc})",
                              FIX_BINDING) from exc


def binding_version() -> str | None:
    try:
        return metadata.version("habana-pyhlml")
    except metadata.PackageNotFoundError:
        return None


def text(raw: Any) -> str:
    """A string HLML hands out (bytes from 1.10 on), an invalid UTF-8 byte replaced."""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


class HlmlSession:
    """hlml_init on construction (HlmlUnavailable when it cannot be had), close() for
    hlml_shutdown. One per process: the binding keeps its library in a module global."""

    def __init__(self, path: str) -> None:
        self.path = path
        main = self.hlml = binding()
        from pyhlml.hlml_error import HLMLError
        from pyhlml.hlml_lib import LibHLML

        self.codes = Codes(
            error=HLMLError,
            absent=frozenset({NOT_SUPPORTED, NOT_FOUND, NO_DATA}),
            lost=frozenset({AIP_IS_LOST, TIMEOUT}),
            gone=frozenset({UNINITIALIZED, DRIVER_NOT_LOADED}),
            gone_error=HlmlGone,
        )
        try:
            ctypes.CDLL(path)
        except OSError as exc:
            raise HlmlUnavailable(f"HLML library {path} cannot be loaded: {exc}",
                                  FIX_LIBRARY) from exc
        lib = LibHLML(path)
        main.ErrorsAsClass()  # what hlmlInit's _wrapperInit does besides LibHLML()
        main._hlmlOBJ = lib  # type: ignore[attr-defined]  # every pyhlml function reads it
        try:
            code = lib.get_func_ptr("hlml_init")()
        except HLMLError as exc:
            code = exc.value
        if code != SUCCESS:
            if code == DRIVER_NOT_LOADED:
                raise HlmlUnavailable("the habanalabs driver is not loaded", FIX_DRIVER)
            raise HlmlUnavailable(f"hlml_init failed with HLML error {code}")
        lib.inc_ref()
        self.symbols = frozenset(name for name in _OPTIONAL if hasattr(lib.lib, name))
        self._lock = threading.Lock()
        self._handles: dict[str, Any] = {}
        self.driver_version = self._global("hlmlGetDriverVersion")
        self.hlml_version = self._global("hlmlGetHLMLVersion")
        self.count = int(main.hlmlDeviceGetCount())

    def _global(self, name: str) -> str | None:
        try:
            return text(getattr(self.hlml, name)()) or None
        except self.codes.error:
            return None

    def has(self, function: str, symbol: str) -> bool:
        """Whether both the binding (`function`) and the library (`symbol`) have it."""
        return hasattr(self.hlml, function) and symbol in self.symbols

    def handle(self, pci_address: str) -> Any:
        """The device at this PCI address (0000:b3:00.0, sysfs's form), copied out of the
        binding's shared handle (module docstring). Raises the binding's error (NOT_FOUND:
        HLML does not list it)."""
        with self._lock:
            got = self._handles.get(pci_address)
        if got is not None:
            return got
        raw = self.hlml.hlmlDeviceGetHandleByPCIBusID(pci_address)
        got = ctypes.c_void_p(getattr(raw, "value", raw))
        with self._lock:
            self._handles[pci_address] = got
        return got

    def close(self) -> None:
        with contextlib.suppress(Exception):  # the library may be gone already
            self.hlml.hlmlShutdown()


# Functions a driver release may lack (the binding's get_func_ptr would answer
# INVALID_ARGUMENT, indistinguishable from a bad argument): looked up once per session.
_OPTIONAL = ("hlml_device_get_power_management_limit", "hlml_nic_get_link",
             "hlml_nic_get_statistics", "hlml_get_mac_addr_info",
             "hlml_device_get_replaced_rows", "hlml_device_get_replaced_rows_pending_status")
