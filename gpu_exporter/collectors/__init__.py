"""Every collector, registered here in one place: one import and one line each.

The order is the order of `doctor` and of the `--collector.<name>` flags.
"""

from __future__ import annotations

from gpu_exporter.collectors.base import Collector

REGISTRY: tuple[type[Collector], ...] = (
)


def by_name() -> dict[str, type[Collector]]:
    return {c.name: c for c in REGISTRY}
