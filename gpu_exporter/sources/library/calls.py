"""How a management library's answers are sorted, for every library-based vendor (NVML,
HLML): each binding raises one exception type carrying the library's return code, and
each library has codes meaning

- absent: the hardware or the driver does not have the value; it is left out, silently;
- lost: this device stopped answering (`DeviceLost`); the others are unaffected;
- gone: the library itself stopped answering (a driver unloaded): the session is started
  again (`gone`, the vendor's exception, is raised);
- anything else on one value: that value is absent and a failure is reported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


class DeviceLost(Exception):
    """This device stopped answering (NVML GPU_IS_LOST, HLML AIP_IS_LOST, ...)."""


@dataclass(frozen=True)
class Codes:
    """A library's return codes, sorted (module docstring)."""

    error: type[BaseException]  # what the binding raises; its `.value` is the code
    absent: frozenset[int]
    lost: frozenset[int]
    gone: frozenset[int]
    # what is raised for a gone code: the vendor's "start the session again" exception
    gone_error: Callable[[str], BaseException]


@dataclass
class DeviceCalls:
    """Runs one device's library calls and sorts their errors by `codes`."""

    key: str
    codes: Codes
    failures: list[tuple[str, str]] = field(default_factory=list)

    def check(self, what: str, code: int, exc: BaseException | None = None) -> None:
        if code in self.codes.absent:
            return
        if code in self.codes.lost:
            raise DeviceLost(f"{what}: {exc or code}")
        if code in self.codes.gone:
            raise self.codes.gone_error(f"{what}: {exc or code}")
        self.failures.append((f"{self.key}:{what}", f"{what} failed on {self.key}: {exc or code}"))

    def __call__(self, what: str, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return fn(*args)
        except self.codes.error as exc:
            self.check(what, int(getattr(exc, "value", -1)), exc)
            return None
