"""Every collector, registered here in one place: one import and one line each.

The order is the order of `doctor` and of the `--collector.<name>` flags.
"""

from __future__ import annotations

from gpu_exporter.collectors.amd import AmdCollector
from gpu_exporter.collectors.base import Collector
from gpu_exporter.collectors.ebpf import EbpfCollector
from gpu_exporter.collectors.gaudi import GaudiCollector
from gpu_exporter.collectors.host import HostCollector
from gpu_exporter.collectors.intel import IntelCollector
from gpu_exporter.collectors.nvidia import NvidiaCollector
from gpu_exporter.collectors.power import PowerCollector
from gpu_exporter.collectors.processes import ProcessesCollector

REGISTRY: tuple[type[Collector], ...] = (
    NvidiaCollector,
    AmdCollector,
    IntelCollector,
    GaudiCollector,
    ProcessesCollector,
    HostCollector,
    PowerCollector,
    EbpfCollector,
)

