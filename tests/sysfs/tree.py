"""Build fake `/sys` trees from the real card captures in tests/fixtures/sysfs, with the
symlink layout of a real machine:

    devices/pci0000:00/<address>/                 the PCI device (the capture's device/)
    devices/pci0000:00/<address>/drm/cardN/       the DRM card (the capture's cardN/)
    devices/pci0000:00/<address>/drm/cardN/device -> ../../../<address>
    devices/pci0000:00/<address>/drm/cardN/cardN-DP-1/   a connector
    class/drm/cardN       -> ../../devices/pci0000:00/<address>/drm/cardN
    class/drm/cardN-DP-1  -> ../../devices/pci0000:00/<address>/drm/cardN/cardN-DP-1
    bus/pci/devices/<address> -> ../../../devices/pci0000:00/<address>

The capture's `uevent` gets the new address in `PCI_SLOT_NAME=` (two captures share
0000:0b:00.0, two share 0000:09:00.0), everything else is copied byte for byte (NUL
padding included).

A card can sit below the PCI bridges a real machine has above it (`ports`): the slot's
root port, a platform switch, the card's own switch. Each is a folder of its own on the
device path, with the files the kernel gives a bridge and its `bus/pci/devices` link:

    devices/pci0000:00/0000:00:03.1/0000:0a:00.0/0000:0b:00.0/0000:0c:00.0/
                       root port    upstream     downstream   the GPU
                                    (the card's own switch)

`card_switch()` builds the switches of the captured cards as they are (device ids and
link capabilities of Navi 21, Vega 10, DG2 and Battlemage boards), `root_port()` a slot.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sysfs"

# name -> (capture folder, card folder in it)
CAPTURES: dict[str, tuple[str, str]] = {
    "rx6900xt": ("amd/rx6900xt", "card0"),
    "vega56": ("amd/vega56", "card0"),
    "phoenix": ("amd/phoenix", "card1"),
    "a380": ("intel/a380-i915", "card1"),
    "b580": ("intel/b580", "card1"),
    "rtx4080": ("nvidia/rtx4080", "card1"),
    "gaudi2": ("habana/gaudi2", ""),  # no DRM card: an accel node (add_accel)
}


def capture(name: str) -> Path:
    """The capture's card folder (read-only source of the raw files)."""
    folder, card = CAPTURES[name]
    return FIXTURES / folder / card


def raw(name: str, relative: str) -> bytes:
    """A raw file of a capture, `relative` to its card folder (e.g. `device/...`)."""
    return (capture(name) / relative).read_bytes()


def raw_text(name: str, relative: str) -> str:
    """The text of a capture file as a person would read it: up to the first NUL."""
    return raw(name, relative).split(b"\0", 1)[0].decode().strip()


# What the PCI core shows of every device (drivers/pci/pci-sysfs.c), with or without a
# working driver: what stays of a card whose driver lost it.
PCI_CORE_FILES = frozenset({
    "ari_enabled", "boot_vga", "broken_parity_status", "class", "config",
    "consistent_dma_mask_bits", "current_link_speed", "current_link_width",
    "d3cold_allowed", "device", "dma_mask_bits", "driver_override", "enable", "irq",
    "link", "local_cpulist", "local_cpus", "max_link_speed", "max_link_width",
    "modalias", "msi_bus", "numa_node", "power", "power_state", "revision",
    "subsystem_device", "subsystem_vendor", "uevent", "vendor",
})


@dataclass(frozen=True)
class Port:
    """A PCI bridge on the path to a card (a PCIe root port or a switch port). `current_*`
    is its link towards the card for a downstream or root port, towards the host for an
    upstream port; `max_*` its own capability, as the kernel's files say."""

    address: str
    pci_id: str  # vendor:device, e.g. "1002:1478"
    current_speed: str  # "16.0 GT/s PCIe", as current_link_speed reads
    current_width: int
    max_speed: str
    max_width: int
    aer: bool = True  # has the AER capability: aer_dev_* files, all counts 0

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True)
        vendor, _, device = self.pci_id.partition(":")
        (folder / "vendor").write_text(f"0x{vendor}\n")
        (folder / "device").write_text(f"0x{device}\n")
        (folder / "class").write_text("0x060400\n")
        (folder / "uevent").write_text(
            f"DRIVER=pcieport\nPCI_CLASS=60400\nPCI_ID={self.pci_id.upper()}\n"
            f"PCI_SLOT_NAME={self.address}\n")
        (folder / "current_link_speed").write_text(self.current_speed + "\n")
        (folder / "current_link_width").write_text(f"{self.current_width}\n")
        (folder / "max_link_speed").write_text(self.max_speed + "\n")
        (folder / "max_link_width").write_text(f"{self.max_width}\n")
        if self.aer:
            for name in AER_FILES:
                set_aer(folder, name, 0)


# The real captures' AER files: the kernel's format (one line per error bit, then the total).
AER_FILES = ("aer_dev_correctable", "aer_dev_nonfatal", "aer_dev_fatal")
_AER_TEMPLATE = "rx6900xt"


def set_aer(folder: Path, name: str, total: int, first: int | None = None) -> None:
    """Writes `folder/name` in the capture's format with `total` errors, counted on the
    first error bit (RxErr, Undefined) unless `first` says otherwise."""
    lines = raw_text(_AER_TEMPLATE, f"device/{name}").splitlines()
    key = lines[0].split()[0]
    lines[0] = f"{key} {total if first is None else first}"
    lines[-1] = f"{lines[-1].split()[0]} {total}"
    (folder / name).write_text("\n".join(lines) + "\n")


# PCIe switches the captured cards carry (lspci -nn of such boards), with the link
# capability of their upstream port.
CARD_SWITCHES: dict[str, tuple[str, str, str, int]] = {
    # kind: (upstream port id, downstream port id, max speed, max width)
    "navi21": ("1002:1478", "1002:1479", "16.0 GT/s PCIe", 16),  # RX 6800/6900
    "vega10": ("1002:1470", "1002:1471", "8.0 GT/s PCIe", 16),  # RX Vega 56/64
    "dg2": ("8086:4fa1", "8086:4fa4", "16.0 GT/s PCIe", 8),  # Arc A380/A750/A770
    "bmg": ("8086:e2ff", "8086:e2f0", "16.0 GT/s PCIe", 8),  # Arc B580
}


def card_switch(kind: str, upstream: str, downstream: str, slot: tuple[str, int],
                inner: tuple[str, int]) -> tuple[Port, Port]:
    """The card's own switch: its upstream port trained to `slot` (speed, width) with the
    slot, its downstream port to `inner` with the GPU (what the GPU function reports)."""
    up_id, down_id, max_speed, max_width = CARD_SWITCHES[kind]
    return (Port(upstream, up_id, slot[0], slot[1], max_speed, max_width),
            Port(downstream, down_id, inner[0], inner[1], inner[0], inner[1]))


def root_port(address: str, pci_id: str, max_speed: str, max_width: int,
              link: tuple[str, int]) -> Port:
    """The slot: a root port of the CPU (or chipset) with its capability, trained to
    `link` (speed, width) with what is plugged in."""
    return Port(address, pci_id, link[0], link[1], max_speed, max_width)


@dataclass(frozen=True)
class Card:
    name: str
    address: str
    number: int
    device: Path  # the PCI device folder in the tree
    card: Path  # devices/.../drm/cardN


class FakeSysfs:
    def __init__(self, root: Path) -> None:
        self.root = root
        for sub in ("devices/pci0000:00", "class/drm", "bus/pci/devices"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        self.cards: dict[str, Card] = {}

    def add(self, name: str, address: str, number: int, connectors: tuple[str, ...] = ("DP-1",),
            ports: Sequence[Port] = ()) -> Card:
        """The capture `name` as the PCI device `address` with DRM card `number`, below
        `ports` (the root port first; none: right under the host bridge)."""
        src = capture(name)
        parent = self.root / "devices" / "pci0000:00"
        for port in ports:
            parent = parent / port.address
            if not parent.exists():
                port.write(parent)
                self._link_pci(port.address, parent)
        device = parent / address
        shutil.copytree(src / "device", device, symlinks=True)
        _rewrite_slot(device / "uevent", address)
        card = device / "drm" / f"card{number}"
        card.mkdir(parents=True)
        for entry in src.iterdir():
            if entry.name == "device":
                continue
            if entry.is_dir():
                shutil.copytree(entry, card / entry.name, symlinks=True)
            else:
                shutil.copy2(entry, card / entry.name)
        os.symlink(f"../../../{address}", card / "device")
        drm = self.root / "class" / "drm"
        os.symlink(os.path.relpath(card, drm), drm / f"card{number}")
        for conn in connectors:
            (card / f"card{number}-{conn}").mkdir()
            (card / f"card{number}-{conn}" / "status").write_text("connected\n")
            os.symlink(os.path.relpath(card / f"card{number}-{conn}", drm),
                       drm / f"card{number}-{conn}")
        self._link_pci(address, device)
        self._link_driver(address, device)
        out = Card(name, address, number, device, card)
        self.cards[address] = out
        return out

    def _link_pci(self, address: str, folder: Path) -> None:
        bus = self.root / "bus" / "pci" / "devices"
        os.symlink(os.path.relpath(folder, bus), bus / address)

    def _link_driver(self, address: str, folder: Path) -> None:
        """The driver core's bind link, bus/pci/drivers/<driver>/<address>."""
        uevent = (folder / "uevent").read_text(errors="replace").split("\0", 1)[0]
        driver = dict(line.partition("=")[::2] for line in uevent.splitlines()).get("DRIVER")
        if driver:
            drivers = self.root / "bus" / "pci" / "drivers" / driver.strip()
            drivers.mkdir(parents=True, exist_ok=True)
            os.symlink(os.path.relpath(folder, drivers), drivers / address)

    def add_plain(self, name: str, number: int) -> Path:
        """The capture as it is: `class/drm/cardN` a folder whose `device` is a plain
        folder (no bus/pci entry): the address can only come from device/uevent."""
        dest = self.root / "class" / "drm" / f"card{number}"
        shutil.copytree(capture(name), dest, symlinks=True)
        return dest

    def add_non_gpu(self, address: str, vendor: str, klass: str) -> Path:
        """A PCI device that is not a GPU (a NIC, an audio function of the GPU)."""
        device = self.root / "devices" / "pci0000:00" / address
        device.mkdir(parents=True)
        (device / "vendor").write_text(vendor + "\n")
        (device / "class").write_text(klass + "\n")
        (device / "uevent").write_text(f"PCI_SLOT_NAME={address}\n")
        os.symlink(f"../../../devices/pci0000:00/{address}",
                   self.root / "bus" / "pci" / "devices" / address)
        return device

    def lose_driver_files(self, address: str) -> None:
        """The card as its driver leaves it when the GPU is lost (fallen off the bus, a
        failed reset): still bound (`uevent` DRIVER=), the PCI core's files still there,
        the driver's own files (hwmon, gpu_busy_percent, ...) and its DRM card gone.
        `mend_driver_files` puts them back."""
        card = self.cards[address]
        stash = self._stash(address)
        stash.mkdir(parents=True)
        for entry in card.device.iterdir():
            if entry.name not in PCI_CORE_FILES:
                entry.rename(stash / entry.name)
        for link in (self.root / "class" / "drm").iterdir():
            if link.name == f"card{card.number}" or link.name.startswith(f"card{card.number}-"):
                link.rename(stash / f"class-drm-{link.name}")

    def mend_driver_files(self, address: str) -> None:
        stash = self._stash(address)
        for entry in stash.iterdir():
            if entry.name.startswith("class-drm-"):
                entry.rename(self.root / "class" / "drm" / entry.name[len("class-drm-"):])
            else:
                entry.rename(self.cards[address].device / entry.name)
        stash.rmdir()

    def _stash(self, address: str) -> Path:
        return self.root.parent / "stash" / address

    def bind(self, address: str, driver: str) -> None:
        """The card's PCI device bound to another driver (vfio-pci for a VM, ...)."""
        _rewrite_uevent(self.cards[address].device / "uevent", "DRIVER", driver)

    def add_accel(self, name: str, address: str, minor: int) -> Card:
        """An accelerator of the kernel's accel subsystem (habanalabs: Gaudi) as the PCI
        device `address`, with its node `accel/accel<minor>` and class/accel link; no DRM
        card."""
        device = self.root / "devices" / "pci0000:00" / address
        shutil.copytree(capture(name) / "device", device, symlinks=True)
        _rewrite_slot(device / "uevent", address)
        node = device / "accel" / f"accel{minor}"
        if minor != 0:
            (device / "accel" / "accel0").rename(node)
        _rewrite_uevent(node / "uevent", "MINOR", str(minor))
        _rewrite_uevent(node / "uevent", "DEVNAME", f"accel/accel{minor}")
        (node / "dev").write_text(f"261:{minor}\n")
        accel = self.root / "class" / "accel"
        accel.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(node, accel), accel / f"accel{minor}")
        self._link_pci(address, device)
        out = Card(name, address, minor, device, node)
        self.cards[address] = out
        return out

    def add_virtual_function(self, name: str, address: str, number: int, physfn: str
                             ) -> Card:
        """An SR-IOV VF of the card at `physfn`: the same driver, a `physfn` link."""
        card = self.add(name, address, number, connectors=())
        os.symlink(f"../{physfn}", card.device / "physfn")
        return card

    def remove(self, address: str) -> None:
        """Unplug: the device folder and every link to it disappear."""
        card = self.cards.pop(address)
        for link in list((self.root / "class" / "drm").iterdir()):
            if link.name == f"card{card.number}" or link.name.startswith(f"card{card.number}-"):
                link.unlink()
        (self.root / "bus" / "pci" / "devices" / address).unlink()
        for bound in (self.root / "bus" / "pci" / "drivers").glob(f"*/{address}"):
            bound.unlink()  # the driver core unbinds it
        shutil.rmtree(card.device)


def _rewrite_slot(uevent: Path, address: str) -> None:
    _rewrite_uevent(uevent, "PCI_SLOT_NAME", address)


def _rewrite_uevent(uevent: Path, key: str, value: str) -> None:
    text = uevent.read_bytes().split(b"\0", 1)[0].decode()
    lines = [f"{key}={value}" if line.startswith(f"{key}=") else line
             for line in text.splitlines()]
    uevent.write_text("\n".join(lines) + "\n")
