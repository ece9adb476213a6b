"""Kernel names: demangling, template arguments stripped, and the cap on distinct names."""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from functools import lru_cache

UNKNOWN = "unknown"
OTHER = "other"


@lru_cache(maxsize=1)
def _cxa_demangle() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    # libstdc++'s own demangler, in-process (bcc already loads libstdc++ through LLVM).
    name = ctypes.util.find_library("stdc++") or "libstdc++.so.6"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return None
    fn = lib.__cxa_demangle
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                   ctypes.POINTER(ctypes.c_int)]
    return fn


@lru_cache(maxsize=1)
def _free() -> ctypes._CFuncPtr:  # type: ignore[name-defined]
    libc = ctypes.CDLL(None)
    fn = libc.free
    fn.argtypes = [ctypes.c_void_p]
    fn.restype = None
    return fn


def demangle(symbol: str) -> str:
    """The demangled form of an Itanium C++ name; other names come back unchanged."""
    if not symbol.startswith("_Z"):
        return symbol
    fn = _cxa_demangle()
    if fn is None:
        return symbol
    status = ctypes.c_int(0)
    ptr = fn(symbol.encode(), None, None, ctypes.byref(status))
    if status.value != 0 or not ptr:
        return symbol
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        _free()(ptr)


def _strip_templates(text: str) -> str:
    out: list[str] = []
    depth = 0
    i = 0
    while i < len(text):
        ch = text[i]
        # operator<, operator<<, operator<= keep their angle brackets.
        if depth == 0 and text.startswith("operator", i):
            j = i + len("operator")
            k = j
            while k < len(text) and text[k] in "<>=":
                k += 1
            out.append(text[i:k])
            i = k
            continue
        if ch == "<":
            depth += 1
        elif ch == ">" and depth > 0:
            depth -= 1
        elif depth == 0:
            out.append(ch)
        i += 1
    return "".join(out)


def _strip_parameters(text: str) -> str:
    """Drop the trailing parameter list (and cv/ref qualifiers after it)."""
    text = text.rstrip()
    for suffix in (" const", " volatile", " &&", " &"):
        while text.endswith(suffix):
            text = text[: -len(suffix)].rstrip()
    if not text.endswith(")"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            depth -= 1
            if depth == 0:
                return text[:i].rstrip()
    return text


def _last_word(text: str) -> str:
    """The name after a return type ("void ns::f" -> "ns::f"), parentheses respected."""
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        ch = text[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
        elif ch == " " and depth == 0:
            return text[i + 1:]
    return text


def kernel_name(symbol: str) -> str:
    """`_ZN2ml4gemmIfLi4EEEvPT_i` -> `ml::gemm`: demangled, without template arguments,
    parameters or return type. Plain C names come back unchanged."""
    text = demangle(symbol)
    if text == symbol and not symbol.startswith("_Z"):
        return symbol or UNKNOWN
    name = _last_word(_strip_parameters(_strip_templates(text)))
    return name or UNKNOWN


# A kernel name longer than this (characters, demangled, without template arguments) is
# reported as `other` and counted (NameCap.too_long): a 64 KiB name (generated code, a
# hostile binary) would make a 64 KiB label on every scrape.
NAME_LABEL_MAX = 1024


class NameCap:
    """At most `limit` distinct names; later names become `other`. Once a name is in, it
    stays in, so a series never changes its label. A name longer than NAME_LABEL_MAX is
    `other` too (`too_long`: how many such names were seen)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._names: set[str] = {UNKNOWN}
        self._lock = threading.Lock()
        self.too_long = 0

    def admit(self, name: str) -> str:
        with self._lock:
            if name in self._names:
                return name
            if len(name) > NAME_LABEL_MAX:
                self.too_long += 1
                return OTHER
            if len(self._names) - 1 >= self.limit:
                return OTHER
            self._names.add(name)
            return name


# Distinct process_executable_name values with series of their own, by default
# (--ebpf.executable-names-max). spec/series-budget.yml allows a process 110 series of
# the families without a kernel name: 65 labels (64 names and `other`) stay within
# 7,150, under the 10,000 a page may hold. A launch loop costs about 35: 1,500 names of
# one made 52,878 series uncapped (tests/drills/test_ebpf_drills.py).
EXECUTABLES_MAX = 64
# Seconds a series of exited processes is kept after the last count folded into it, by
# default (--ebpf.exited-series-expiry; sources/ebpf/maps.py drops it, freeing its
# executable's place): long enough for many scrapes to read its final value, short
# enough that a stream of short-lived programs does not pile up.
EXPIRY_SECONDS = 600.0


class ExecutableCap:
    """At most `limit` distinct process_executable_name values with series of their own;
    the processes of the others are reported as `other`. Assignment is sticky: a name
    holds its place while anything holds it (a live process of that name, a series of
    exited ones not yet expired), and a name folded stays folded while a live process of
    it is folded: a process's counts never move between its own series and `other`.
    A name is free again (admitted or folded afresh) once nothing holds it. `unknown`
    (and a program named `other`) is never capped. `folded_total`: processes reported
    as `other`, each counted once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.folded_total = 0
        self._own: dict[str, int] = {}  # name -> holders
        self._folded: dict[str, int] = {}  # name -> live processes folded
        self._lock = threading.Lock()

    def acquire(self, name: str) -> str:
        """The label of a new process of `name`, held until `release(name, label)`."""
        with self._lock:
            if name in (UNKNOWN, OTHER):
                return name
            if name in self._own:
                self._own[name] += 1
                return name
            if name not in self._folded and len(self._own) < self.limit:
                self._own[name] = 1
                return name
            self._folded[name] = self._folded.get(name, 0) + 1
            self.folded_total += 1
            return OTHER

    def hold(self, label: str) -> None:
        """A series of exited processes under `label` appeared: it holds the name."""
        with self._lock:
            if label in self._own:
                self._own[label] += 1

    def release(self, name: str, label: str) -> None:
        """A process of `name` reported as `label` was forgotten, or (name == label) a
        series holding the name expired."""
        with self._lock:
            if name in (UNKNOWN, OTHER):
                return
            held = self._folded if label == OTHER else self._own
            left = held.get(name, 0) - 1
            if left > 0:
                held[name] = left
            else:
                held.pop(name, None)

    def __len__(self) -> int:
        return len(self._own)
