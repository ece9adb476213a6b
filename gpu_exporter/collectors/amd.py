"""AMD GPUs (amdgpu) from sysfs: every hw_gpu_* family the kernel exposes, no vendor
daemon. What is read from where: `gpu_exporter.readers.amd`."""

from __future__ import annotations

from pathlib import Path

from gpu_exporter.collectors.sysfs_gpus import SysfsGpuCollector
from gpu_exporter.readers import amd
from gpu_exporter.readers.pci import PciGpu
from gpu_exporter.readers.sysfs import Problems
from gpu_exporter.records import GpuIdentity, GpuReading


class AmdCollector(SysfsGpuCollector):
    name = "amd"
    help = "AMD GPUs from sysfs (amdgpu): utilization, memory, power, energy, temperatures."
    vendor = "amd"

    def identity(self, gpu: PciGpu, sysfs: Path) -> GpuIdentity:
        return amd.identity(gpu, sysfs)

    def read(self, gpu: PciGpu, ident: GpuIdentity, problems: Problems) -> GpuReading:
        return amd.read(gpu, ident, problems)
