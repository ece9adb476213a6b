"""The NVIDIA GPUs this exporter is given, as the kernel driver lists them:
`<procfs>/driver/nvidia/gpus/<PCI address>/information`, one folder per GPU the driver
bound, whether or not it could initialise it (the format of the driver's
nv-procfs.c, `Key: <tabs> value`):

    Model:           NVIDIA H100 80GB HBM3
    IRQ:             545
    GPU UUID:        GPU-????????-????-????-????-????????????   (not initialised)
    Video BIOS:      ??.??.??.??.??
    Bus Type:        PCIe
    DMA Size:        52 bits
    DMA Mask:        0xfffffffffffff
    Bus Location:    0000:18:00.0
    Device Minor:    0
    GPU Excluded:    No

A GPU the driver was told to exclude (NVreg_ExcludedGpus) is not expected, nor an SR-IOV
virtual function (`<sysfs>/bus/pci/devices/<address>/physfn`: a vGPU host's). The NVIDIA
container runtime shows a container only its own GPUs' folders and `/dev/nvidia<minor>`
nodes; with the host's /proc mounted instead, a GPU whose node is missing belongs to
another container and is not expected either, unless no GPU has a node at all (no
NVIDIA runtime: the GPUs are there, just not usable from here).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from gpu_exporter.readers.file_values import read_text
from gpu_exporter.readers.sysfs.pci import normalize_pci_address

# "GPU-????????-…" and "??.??.??.??.??": the driver has not read the value.
_UNKNOWN = re.compile(r"\?")
_NVRM_VERSION = re.compile(r"Kernel Module\s+(\S+)")


@dataclass(frozen=True)
class DriverGpu:
    pci_address: str  # 0000:18:00.0
    name: str | None  # "Model"
    uuid: str | None  # None while the driver shows GPU-????????-…
    firmware_version: str | None  # "Video BIOS", None while unknown
    minor: int | None  # /dev/nvidia<minor>
    excluded: bool


@dataclass(frozen=True)
class DriverGpus:
    """What the driver lists: its version and the GPUs this exporter should see."""

    version: str | None
    gpus: tuple[DriverGpu, ...]  # expected: not excluded, given to this container
    listed: frozenset[str] = frozenset()  # every GPU it has a folder for (PCI addresses)

    def by_pci(self) -> dict[str, DriverGpu]:
        return {g.pci_address: g for g in self.gpus}


def read_driver_gpus(procfs: str, devfs: str, sysfs: str) -> DriverGpus | None:
    """None when the driver is not loaded (no <procfs>/driver/nvidia)."""
    root = Path(procfs, "driver", "nvidia")
    if not os.path.isdir(root):
        return None
    version_text = read_text(root / "version") or ""
    version = _NVRM_VERSION.search(version_text)
    try:
        names = sorted(os.listdir(root / "gpus"))
    except OSError:
        names = []
    listed = []
    for name in names:
        pci = normalize_pci_address(name)
        if pci is not None:
            listed.append(_gpu(pci, read_text(root / "gpus" / name / "information") or ""))
    pci_devices = Path(sysfs, "bus", "pci", "devices")
    wanted = [g for g in listed if not g.excluded
              and not os.path.lexists(pci_devices / g.pci_address / "physfn")]
    nodes = {g.minor for g in wanted
             if g.minor is not None and os.path.exists(Path(devfs, f"nvidia{g.minor}"))}
    if nodes:
        wanted = [g for g in wanted if g.minor in nodes]
    return DriverGpus(version.group(1) if version else None, tuple(wanted),
                      frozenset(g.pci_address for g in listed))


def _gpu(pci: str, text: str) -> DriverGpu:
    info: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            info[key.strip()] = value.strip()
    uuid = info.get("GPU UUID") or None
    vbios = info.get("Video BIOS") or None
    minor = info.get("Device Minor", "")
    return DriverGpu(
        pci_address=pci,
        name=info.get("Model") or None,
        uuid=None if uuid is None or _UNKNOWN.search(uuid) else uuid,
        firmware_version=None if vbios is None or _UNKNOWN.search(vbios) else vbios,
        minor=int(minor) if minor.isdigit() else None,
        excluded=info.get("GPU Excluded", "No").lower() == "yes",
    )
