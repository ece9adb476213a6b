"""Intel GPUs (i915 and xe) from sysfs and DRM fdinfo. What is read from where:
`gpu_exporter.readers.sysfs.intel`; engine utilization: `gpu_exporter.readers.procfs.fdinfo`.

Engine utilization is the sum over the DRM clients of each card between two scrapes
(`fdinfo.EngineUsage`): absent on the first scrape, and absent for a card no process had
open during the interval (nothing was measured, so nothing is reported)."""

from __future__ import annotations

from pathlib import Path

from gpu_exporter.collectors.base import Availability, Sink
from gpu_exporter.collectors.sysfs_gpus import DISCOVERY_INTERVAL, SysfsGpuCollector
from gpu_exporter.model.records import GpuIdentity, GpuReading, GpuTask
from gpu_exporter.readers.file_values import Problems
from gpu_exporter.readers.procfs import fdinfo
from gpu_exporter.readers.sysfs import intel
from gpu_exporter.readers.sysfs.pci import PciGpu


class IntelCollector(SysfsGpuCollector):
    name = "intel"
    help = ("Intel GPUs from sysfs (i915, xe) and DRM fdinfo: engine utilization, energy, "
            "power, clocks, temperatures.")
    vendor = "intel"
    vendor_name = "Intel"
    vendor_id = 0x8086
    drivers = intel.DRIVERS
    load_driver = ("load the xe (Battlemage, Lunar Lake and newer) or i915 kernel module "
                   "(`modprobe xe`, `modprobe i915`) and bind the GPU to it")

    def start(self) -> Availability:
        self._reader = intel.IntelReader(
            relist_seconds=self.settings.get(DISCOVERY_INTERVAL))
        self._engines = fdinfo.EngineUsage()
        self._utilization: dict[str, dict[GpuTask, float]] = {}
        return super().start()

    def before_read(self, gpus: list[PciGpu], sink: Sink) -> None:
        self._utilization = {}
        if not gpus:
            return
        try:
            clients = [c for c in sink.inputs.drm_clients(self.settings.procfs, sink.deadline)
                       if c.driver in intel.DRIVERS]
        except TimeoutError as exc:
            sink.fail("fdinfo", str(exc))
            self._engines = fdinfo.EngineUsage()  # the next baseline starts afresh
            return
        self._utilization = fdinfo.device_utilization(self._engines.update(clients))

    def identity(self, gpu: PciGpu, sysfs: Path, answered: bool) -> GpuIdentity:
        return intel.identity(gpu, sysfs, answered=answered)

    def read(self, gpu: PciGpu, ident: GpuIdentity, problems: Problems) -> GpuReading:
        return self._reader.read(gpu, ident, problems, self._utilization.get(gpu.pci_address))

    def keep_only(self, pci_addresses: set[str]) -> None:
        self._reader.keep_only(pci_addresses)
