"""Start-up settings shared by every collector, parsed once by the CLI."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class ConfigError(Exception):
    """Bad flag, value or configuration: start-up stops with this one line (exit 2)."""


@dataclass(frozen=True)
class Settings:
    sysfs: str = "/sys"
    procfs: str = "/proc"
    scrape_timeout_seconds: float = 5.0
    enabled_collectors: frozenset[str] = frozenset()
    # Resource labels added to every series: host_name, service_name, OTEL attributes.
    resource_labels: Mapping[str, str] = field(default_factory=dict)
    # Collector-specific options by their flag name without dashes, e.g.
    # "ebpf.kernel-names-max"; each collector declares its own in `options`.
    options: Mapping[str, Any] = field(default_factory=dict)
    retry_interval_seconds: float = 30.0

    def option(self, name: str, default: Any = None) -> Any:
        return self.options.get(name, default)
