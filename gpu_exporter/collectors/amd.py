"""AMD GPUs (amdgpu) from sysfs: every hw_gpu_* family the kernel exposes, no vendor
daemon. What is read from where: `gpu_exporter.readers.sysfs.amd`."""

from __future__ import annotations

from pathlib import Path

from gpu_exporter.collectors.base import Availability
from gpu_exporter.collectors.sysfs_gpus import DISCOVERY_INTERVAL, SysfsGpuCollector
from gpu_exporter.model.records import GpuIdentity, GpuReading
from gpu_exporter.readers.file_values import Problems
from gpu_exporter.readers.sysfs import amd
from gpu_exporter.readers.sysfs.pci import PciGpu


class AmdCollector(SysfsGpuCollector):
    name = "amd"
    help = "AMD GPUs from sysfs (amdgpu): utilization, memory, power, energy, temperatures."
    vendor = "amd"
    vendor_name = "AMD"
    vendor_id = 0x1002
    drivers = amd.DRIVERS
    load_driver = "load the amdgpu kernel module (`modprobe amdgpu`) and bind the GPU to it"

    def start(self) -> Availability:
        self._reader = amd.AmdReader(self.settings.get(DISCOVERY_INTERVAL))
        return super().start()

    def identity(self, gpu: PciGpu, sysfs: Path, answered: bool) -> GpuIdentity:
        return amd.identity(gpu, sysfs, answered=answered)

    def read(self, gpu: PciGpu, ident: GpuIdentity, problems: Problems) -> GpuReading:
        return self._reader.read(gpu, ident, problems)

    def keep_only(self, pci_addresses: set[str]) -> None:
        self._reader.keep_only(pci_addresses)
