"""Value types for flags (the CLI's and the collectors' `options`).

Each raises ValueError with a message that says what is wrong; the CLI turns it into one
line naming the flag, and exit 2. Numbers have bounds: a value the exporter cannot honour
(`inf`, `1e10` seconds, a timer beyond what the OS can wait for) is refused where it
enters, not found out later by a scrape. The input table of docs/configuration.md states
each bound; a test checks the table against the CLI.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Generic, TypeVar

# Plain decimal numbers with an optional unit: no exponent, no inf/nan, no sign, no `_`
# (all of which float() would take).
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)?", re.ASCII)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_WHOLE = re.compile(r"\d+", re.ASCII)
N = TypeVar("N", int, float)


@dataclass(frozen=True)
class _Bounded(Generic[N]):
    low: N
    high: N


def _within(value: N, text: str, kind: _Bounded[N]) -> N:
    if not kind.low <= value <= kind.high:
        raise ValueError(f"{text!r} is out of range: {kind}")
    return value


@dataclass(frozen=True)
class Seconds(_Bounded[float]):
    """A duration in seconds from `low` to `high`: `5`, `0.5`, `5s`, `500ms`, `2m`, `1h`."""

    def __call__(self, text: str) -> float:
        text = str(text).strip()
        m = _DURATION.fullmatch(text)
        if m is None:
            raise ValueError(f"{text!r} is not a duration: use seconds (5, 0.5) or a unit "
                             "(500ms, 5s, 2m, 1h)")
        return _within(float(m.group(1)) * _UNIT_SECONDS[m.group(2)], text, self)

    def __str__(self) -> str:
        return f"seconds, {self.low:g} to {self.high:g}"


@dataclass(frozen=True)
class Count(_Bounded[int]):
    """A whole number from `low` to `high`."""

    def __call__(self, text: str) -> int:
        text = str(text).strip()
        if not _WHOLE.fullmatch(text):
            raise ValueError(f"{text!r} is not a whole number")
        return _within(int(text), text, self)

    def __str__(self) -> str:
        return f"whole number, {self.low} to {self.high}"


def regex(text: str) -> str:
    """A regular expression, checked when the flags are parsed; empty matches nothing."""
    try:
        re.compile(text)
    except re.error as exc:
        raise ValueError(f"{text!r} is not a regular expression: {exc}") from None
    return text


# RFC 1123 labels, and `_`, which container runtimes allow in their service names.
_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)", re.ASCII)
_PORT = re.compile(r"[0-9]{1,5}", re.ASCII)


def split_listen_address(text: str) -> tuple[str, int]:
    """`:9445`, `0.0.0.0:9445`, `[::1]:9445`, `localhost:9445` to (host, port); host ""
    is every address. Only the form is checked here: whether it can be bound (the name
    resolves, the address is this host's, the port is free) is for the bind to say."""
    host, sep, port = text.rpartition(":")
    problem = ""
    if not sep or not _PORT.fullmatch(port) or not 0 < int(port) < 65536:
        problem = "expected [host]:port with a port from 1 to 65535, e.g. :9445"
    elif host.startswith("[") or host.endswith("]"):
        inner = host[1:-1] if host.startswith("[") and host.endswith("]") else None
        try:
            ipaddress.IPv6Address(inner or "")
            host = str(inner)
        except ValueError:
            problem = "an IPv6 address goes in brackets, e.g. [::1]:9445"
    elif ":" in host:
        problem = "an IPv6 address goes in brackets, e.g. [::1]:9445"
    elif host and re.fullmatch(r"[0-9.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            problem = f"{host!r} is not an IPv4 address"
    elif host and (len(host) > 253 or not all(
            _HOST_LABEL.fullmatch(label) for label in host.removesuffix(".").split("."))):
        problem = f"{host!r} is not a host name"
    if problem:
        raise ValueError(f"{text!r}: {problem}")
    return host, int(port)


def listen_address(text: str) -> str:
    """A `[host]:port` to serve on (see split_listen_address)."""
    split_listen_address(text)
    return text


RESERVED_PATHS = ("/", "/healthz")


def telemetry_path(text: str) -> str:
    """The metrics path: absolute, not a path the server answers otherwise."""
    if not text.startswith("/"):
        raise ValueError(f"{text!r} must start with /")
    if text in RESERVED_PATHS:
        raise ValueError(f"{text!r} is taken: {' and '.join(RESERVED_PATHS)} are the "
                         "landing page and the health check (which needs no password)")
    if re.search(r"[\s?#\x00-\x1f\x7f]", text):
        raise ValueError(f"{text!r} is not a path (no spaces, '?' or '#')")
    if "//" in text or re.search(r"/\.\.?(/|$)", text):
        # Clients and proxies rewrite such a path (a URL "//metrics" names the host
        # "metrics"; dot segments are removed) before it reaches the exporter: it would
        # never match a request.
        raise ValueError(f"{text!r} is not a normalized path (no '//', '/./' or '/../')")
    return text


@dataclass(frozen=True)
class Choice:
    """One of `values`, exactly."""

    values: tuple[str, ...]

    def __call__(self, text: str) -> str:
        text = str(text).strip()
        if text not in self.values:
            raise ValueError(f"{text!r} is not one of {', '.join(self.values)}")
        return text

    def __str__(self) -> str:
        return " | ".join(self.values)
