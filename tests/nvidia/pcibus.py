"""A sysfs tree of PCI devices, laid out as the kernel does: `bus/pci/devices/<address>/`
with `class`, `vendor`, `device`, `uevent`, a `driver` link into `bus/pci/drivers/` when
a driver is bound, and `physfn` on an SR-IOV virtual function. The values are those of
real devices: an H100 SXM (10de:2330, class 0x030200), its HDMI-less siblings' audio
function (0x040300), an NVSwitch (10de:22a3, bridge class 0x068000), an AMD MI300X."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

H100 = (0x10DE, 0x2330, 0x030200)
AUDIO = (0x10DE, 0x22E8, 0x040300)
NVSWITCH = (0x10DE, 0x22A3, 0x068000)
MI300X = (0x1002, 0x74A1, 0x120000)


@dataclass
class PciDevice:
    address: str  # 0000:18:00.0
    ids: tuple[int, int, int] = H100  # vendor, device, class
    driver: str | None = None  # nvidia, vfio-pci, ... None: unbound
    virtual_function: bool = False


def tree(root: Path, devices: list[PciDevice]) -> Path:
    """Writes the tree under `root` (pass it as --path.sysfs)."""
    pci = root / "bus" / "pci" / "devices"
    pci.mkdir(parents=True)
    for d in devices:
        vendor, device, cls = d.ids
        folder = root / "devices" / "pci0000:00" / d.address
        folder.mkdir(parents=True)
        (folder / "vendor").write_text(f"0x{vendor:04x}\n")
        (folder / "device").write_text(f"0x{device:04x}\n")
        (folder / "class").write_text(f"0x{cls:06x}\n")
        uevent = [f"PCI_CLASS={cls:X}", f"PCI_ID={vendor:04X}:{device:04X}",
                  f"PCI_SLOT_NAME={d.address}"]
        if d.driver is not None:
            drv = root / "bus" / "pci" / "drivers" / d.driver
            drv.mkdir(parents=True, exist_ok=True)
            os.symlink(drv, folder / "driver")
            uevent.insert(0, f"DRIVER={d.driver}")
        (folder / "uevent").write_text("\n".join(uevent) + "\n")
        if d.virtual_function:
            os.symlink(folder, folder / "physfn")
        os.symlink(folder, pci / d.address)
    return root


def h100_bus(driver: str | None) -> list[PciDevice]:
    """The 8 H100s of `fake.h100x8()` at their PCI addresses, bound to `driver`."""
    from tests.fake_nvml.scenario import H100_BUS
    return [PciDevice(f"0000:{b}:00.0", H100, driver) for b in H100_BUS]
