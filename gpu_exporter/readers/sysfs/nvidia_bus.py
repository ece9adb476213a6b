"""NVIDIA GPUs on the PCI bus that the NVIDIA driver does not expose, found through the
exporter's one PCI discovery (`readers.sysfs.pci.discover`: display and accelerator classes, so
a card's audio and USB-C functions and NVSwitches, which are bridges, are not GPUs).

A GPU the driver should have but does not (no driver loaded, or loaded but not bound to
the card) is *failed*: reported `hw_gpu_up 0`, `hw_status{hw_state="failed"}` by its PCI
address. A GPU bound to another driver on purpose (`vfio-pci`, handed to a VM) is not a
failure: it is only named, with its driver, in `nvidia.pci`. Left out, as everywhere:
SR-IOV virtual functions, GPUs the driver lists (it reports them itself: excluded ones,
those of another container and those it could not initialise are its to judge), and,
where the exporter sees only some of the driver's GPUs (a container given a few), every
GPU the driver does not list.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_exporter.model.records import Vendor
from gpu_exporter.readers.procfs.nvidia_driver import DriverGpus
from gpu_exporter.readers.sysfs.pci import PciGpu, device_name, discover

NVIDIA_DRIVER = "nvidia"
_NVIDIA: tuple[Vendor, ...] = ("nvidia",)


@dataclass(frozen=True)
class BusGpu:
    pci_address: str
    name: str | None  # from pci.ids, when known
    driver: str | None  # the driver bound to it; None: none
    reason: str  # why the exporter cannot read it (failed) or where it went (elsewhere)


@dataclass(frozen=True)
class BusGpus:
    failed: tuple[BusGpu, ...] = ()  # the driver should have them and does not
    elsewhere: tuple[BusGpu, ...] = ()  # bound to another driver on purpose
    bound: tuple[str, ...] = ()  # bound to the NVIDIA driver (PCI addresses)


def read_bus_gpus(sysfs: str, driver: DriverGpus | None, *, nvml_up: bool) -> BusGpus:
    """The NVIDIA GPUs of the PCI bus, sorted by what became of them. `driver`: the
    driver's own list (None: no /proc/driver/nvidia); `nvml_up`: NVML answers (then a
    driver is loaded even where its /proc tree is not visible)."""
    gpus = [g for g in discover(sysfs, _NVIDIA).values() if not g.virtual_function]
    listed = driver.listed if driver is not None else frozenset()
    bound = tuple(g.pci_address for g in gpus if g.driver == NVIDIA_DRIVER)
    # A container shown only its own GPUs' folders: the rest of the bus is not its own.
    partial_view = driver is not None and any(a not in listed for a in bound)
    failed, elsewhere = [], []
    for g in gpus:
        if g.driver == NVIDIA_DRIVER:
            continue
        if g.driver is not None:
            elsewhere.append(_gpu(g, f"bound to {g.driver}"
                                  + (" (handed to a VM)" if g.driver.startswith("vfio") else "")
                                  + ", not to the NVIDIA driver: not read here"))
        elif driver is None and not nvml_up:
            failed.append(_gpu(g, "the NVIDIA kernel driver is not loaded"))
        elif driver is not None and not partial_view:
            failed.append(_gpu(g, "the NVIDIA driver is loaded but did not take this GPU "
                                  "(bound to no driver: it failed to probe it)"))
    return BusGpus(tuple(failed), tuple(elsewhere), bound)


def _gpu(g: PciGpu, reason: str) -> BusGpu:
    return BusGpu(g.pci_address, device_name(g.vendor_id, g.device_id), g.driver, reason)
