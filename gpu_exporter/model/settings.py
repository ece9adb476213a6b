"""Start-up settings shared by every collector, parsed once by the CLI, and the flags
(`Option`) they come from."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from gpu_exporter.model import flagtypes

T = TypeVar("T")


class ConfigError(Exception):
    """Bad flag, value or configuration: start-up stops with this one line (exit 2)."""


@dataclass(frozen=True)
class Option(Generic[T]):
    """A flag, `--<name>`, and its environment variable `GPU_EXPORTER_<NAME>`: declared
    once, with its one default; read with `Settings.get(option)`, typed."""

    name: str  # e.g. "ebpf.kernel-names-max"
    type: Callable[[str], T]  # parses the text, ValueError saying what is wrong
    default: T
    help: str
    is_flag: bool = False


SYSFS = Option("path.sysfs", str, "/sys", "sysfs mount point.")
PROCFS = Option("path.procfs", str, "/proc", "procfs mount point.")
SCRAPE_TIMEOUT = Option(
    "scrape.timeout", flagtypes.Seconds(0.1, 300), 5.0,
    "Seconds a scrape may take; a device that has not answered by then reads hw_gpu_up 0.")
RETRY_INTERVAL = Option(
    "collector.retry-interval", flagtypes.Seconds(0.1, 86400), 30.0,
    "Seconds between attempts to start an unavailable collector or to read a GPU that "
    "did not answer.")


@dataclass(frozen=True)
class Settings:
    sysfs: str = SYSFS.default
    procfs: str = PROCFS.default
    scrape_timeout_seconds: float = SCRAPE_TIMEOUT.default
    enabled_collectors: frozenset[str] = frozenset()
    # Resource labels added to every series: host_name, service_name, OTEL attributes.
    resource_labels: Mapping[str, str] = field(default_factory=dict)
    # Collector-specific option values by name ("ebpf.kernel-names-max"); an option not
    # given has its declared default. Each collector declares its own in `options`.
    options: Mapping[str, Any] = field(default_factory=dict)
    retry_interval_seconds: float = RETRY_INTERVAL.default
    # `doctor`: collectors check what they need and change nothing on the host (the
    # eBPF collector compiles and loads its program but attaches no probe).
    check_only: bool = False

    def get(self, option: Option[T]) -> T:
        return cast(T, self.options.get(option.name, option.default))
