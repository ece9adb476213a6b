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
