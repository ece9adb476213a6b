"""One PCI discovery for every vendor: which GPUs this host has, keyed by PCI address.

Devices come from `<sysfs>/bus/pci/devices/*` (display `0x03xxxx` and accelerator
`0x12xxxx` classes of the vendors of `model.vendors`: NVIDIA, AMD, Intel, Habana) and
are tied to their DRM card (Gaudi has none: an accel node) through
`<sysfs>/class/drm/cardN/device` (connector entries such as `card0-DP-1` are skipped;
`card10` and above are cards like any other). Card numbers change across boots, the PCI
address does not, so the address is the key. Where `cardN/device` is a plain folder
instead of a link (some captures, some container mounts) the address comes from
`device/uevent` `PCI_SLOT_NAME=`.

`DeviceTracker` follows the GPUs a collector is meant to read: those bound to its
drivers, SR-IOV virtual functions left out (a `physfn` link: the physical function is the
GPU; a VF is read where it is assigned, in its VM). It rediscovers on an interval and
keeps a card that vanished for a grace period (reported as lost, `hw_gpu_up 0`) before
dropping it.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from gpu_exporter.model.vendors import GPU_DRIVERS, VENDOR_IDS, Vendor
from gpu_exporter.readers import files
from gpu_exporter.readers.file_values import read_text, read_uevent

# The GPU drivers whose bound devices <sysfs>/bus/pci/drivers/<driver>/ links (the driver
# core's bind link): how a device whose own folder cannot be read is still known a GPU.
# Both tables come from the vendor registry (model/vendors.py).
GPU_CLASSES = (0x03, 0x12)  # display controller, processing accelerator
_CARD = re.compile(r"card(\d+)")
# [domain:]bus:device.function; NVML writes an 8-digit domain, sysfs 4 (more for VMD).
_PCI_ADDRESS = re.compile(
    r"(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])"
)
PCI_IDS_PATHS = ("/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids")
PCI_IDS_MAX_BYTES = 32 * 1024 * 1024  # the database is ~1.4 MB


def normalize_pci_address(text: str) -> str | None:
    """The one form every source is keyed by, sysfs's: `00000000:0C:00.0` (NVML),
    `0c:00.0` (kubelet device ids), ` 0000:0c:00.0\n` -> `0000:0c:00.0`; None when the
    text is not a PCI address."""
    m = _PCI_ADDRESS.fullmatch(text.strip())
    if m is None:
        return None
    domain = int(m.group(1) or "0", 16)
    return f"{domain:04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


@dataclass(frozen=True)
class PciGpu:
    """A GPU found in sysfs. Paths are where its files are read from."""

    pci_address: str  # 0000:0c:00.0
    vendor: Vendor
    vendor_id: int
    device_id: int | None
    class_code: int | None  # 0x030000
    driver: str | None  # amdgpu, i915, xe, nvidia (None: no driver bound)
    device_path: Path  # the PCI device folder
    card: str | None  # "card0"; None when no DRM card is bound
    card_path: Path | None  # <sysfs>/class/drm/cardN
    virtual_function: bool = False  # an SR-IOV VF (it has a `physfn` link)

    @property
    def unreadable(self) -> str | None:
        """Why nothing of it can be read (None: it can)."""
        return None

    @property
    def card_number(self) -> int | None:
        if self.card is None:
            return None
        return int(self.card[4:])


def discover(sysfs: str | Path, vendors: Iterable[Vendor] | None = None) -> dict[str, PciGpu]:
    """Every GPU of the wanted vendors (all of `VENDORS` by default), by PCI address."""
    root = Path(sysfs)
    wanted = frozenset(vendors) if vendors is not None else frozenset(VENDOR_IDS.values())
    cards = _drm_cards(root)
    found: dict[str, PciGpu] = {}
    pci_root = root / "bus" / "pci" / "devices"
    try:
        names = sorted(os.listdir(pci_root))
    except OSError:
        names = []
    bound: dict[str, str] | None = None
    for name in names:
        address = normalize_pci_address(name)
        if address is None:
            continue
        card = cards.get(address)
        gpu = _identify(address, pci_root / name, card, wanted)
        if gpu is None and _closed(pci_root / name):
            if bound is None:
                bound = _bound_gpus(root)
            gpu = _unreadable(address, pci_root / name, bound.get(address), wanted)
        if gpu is not None:
            found[address] = gpu
    # A card whose PCI device is not listed under bus/pci (a partial mount) is still a card.
    for address, card in cards.items():
        if address not in found:
            gpu = _identify(address, card[1] / "device", card, wanted)
            if gpu is not None:
                found[address] = gpu
    return dict(sorted(found.items()))


@dataclass(frozen=True)
class UnreadablePciGpu(PciGpu):
    """A GPU whose PCI folder is mode 000 to the exporter's user: known through its
    driver's bind link, reported `hw_gpu_up 0` with `reason`, never read."""

    reason: str = ""

    @property
    def unreadable(self) -> str | None:
        return self.reason


def _closed(device: Path) -> bool:
    """Whether the device's folder may not be opened (mode 000 to this user)."""
    try:
        os.listdir(device)
    except PermissionError:
        return True
    except OSError:
        return False
    return False


def _bound_gpus(root: Path) -> dict[str, str]:
    """PCI address -> GPU driver, from the drivers' bind links (bus/pci/drivers/<d>/)."""
    out: dict[str, str] = {}
    for driver in GPU_DRIVERS:
        try:
            names = sorted(os.listdir(root / "bus" / "pci" / "drivers" / driver))
        except OSError:
            continue  # not loaded
        for name in names:
            address = normalize_pci_address(name)
            if address is not None:
                out.setdefault(address, driver)
    return out


def _unreadable(address: str, device: Path, driver: str | None,
                wanted: frozenset[str]) -> PciGpu | None:
    """A GPU whose PCI folder cannot be opened, known by its driver's bind link alone;
    None for a device no GPU driver is bound to (what it is cannot be told)."""
    vendor = GPU_DRIVERS.get(driver or "")
    if vendor is None or vendor not in wanted:
        return None
    vendor_id = next(i for i, v in VENDOR_IDS.items() if v == vendor)
    return UnreadablePciGpu(
        pci_address=address, vendor=vendor, vendor_id=vendor_id, device_id=None,
        class_code=None, driver=driver, device_path=device, card=None, card_path=None,
        reason=f"{device}: permission denied (its PCI folder may not be opened by the "
        "exporter's user)")


def _drm_cards(root: Path) -> dict[str, tuple[str, Path]]:
    """PCI address -> (cardN, class/drm/cardN path)."""
    drm = root / "class" / "drm"
    try:
        names = os.listdir(drm)
    except OSError:
        return {}
    out: dict[str, tuple[str, Path]] = {}
    for name in sorted(names, key=lambda n: (len(n), n)):
        if not _CARD.fullmatch(name):
            continue  # connectors (card0-DP-1), renderD128, version
        path = drm / name
        address = _card_address(path / "device")
        if address is not None and address not in out:
            out[address] = (name, path)
    return out


def _card_address(device: Path) -> str | None:
    if os.path.islink(device):
        try:
            address = normalize_pci_address(os.path.basename(os.path.realpath(device)))
        except OSError:
            address = None
        if address is not None:
            return address
    return normalize_pci_address(read_uevent(device / "uevent").get("PCI_SLOT_NAME", ""))


def _identify(
    address: str, device: Path, card: tuple[str, Path] | None, wanted: frozenset[str]
) -> PciGpu | None:
    class_code = _hex(read_text(device / "class"))
    if class_code is not None and (class_code >> 16) not in GPU_CLASSES:
        return None  # most PCI devices of a host stop here, after one small read
    uevent = read_uevent(device / "uevent")
    vendor_id = _hex(read_text(device / "vendor"))
    device_id = _hex(read_text(device / "device"))
    pci_id = uevent.get("PCI_ID", "")
    if ":" in pci_id:
        v, _, d = pci_id.partition(":")
        vendor_id = vendor_id if vendor_id is not None else _hex(v)
        device_id = device_id if device_id is not None else _hex(d)
    if class_code is None:
        class_code = _hex(uevent.get("PCI_CLASS"))
    if vendor_id is None or class_code is None:
        return None
    vendor = VENDOR_IDS.get(vendor_id)
    if vendor is None or vendor not in wanted or (class_code >> 16) not in GPU_CLASSES:
        return None
    driver = uevent.get("DRIVER")
    if driver is None and os.path.islink(device / "driver"):
        driver = os.path.basename(os.path.realpath(device / "driver"))
    card_device = card[1] / "device" if card is not None else None
    # Read through the card's device folder when it is a plain folder (it then holds the
    # files); otherwise the PCI device folder is the same place.
    path = card_device if card_device is not None and not os.path.islink(card_device) else device
    return PciGpu(
        pci_address=address, vendor=vendor, vendor_id=vendor_id, device_id=device_id,
        class_code=class_code, driver=driver or None, device_path=path,
        card=card[0] if card else None, card_path=card[1] if card else None,
        virtual_function=os.path.islink(device / "physfn"),
    )


def _hex(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None


def device_name(vendor_id: int, device_id: int | None) -> str | None:
    """The device's name from the pci.ids database (Debian package `pci.ids`; the first
    of `PCI_IDS_PATHS` that exists), e.g. `Navi 21 [Radeon RX 6800/6800 XT / 6900 XT]`;
    None when unknown."""
    if device_id is None:
        return None
    return _pci_ids(PCI_IDS_PATHS).get((vendor_id, device_id))


@lru_cache(maxsize=2)
def _pci_ids(paths: tuple[str, ...]) -> dict[tuple[int, int], str]:
    wanted = set(VENDOR_IDS)
    out: dict[tuple[int, int], str] = {}
    for path in paths:
        try:
            text = files.read_text(path, PCI_IDS_MAX_BYTES)
        except OSError:
            continue
        vendor: int | None = None
        for line in text.splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            if line.startswith("C "):
                break  # device classes follow the vendors
            if not line.startswith("\t"):
                v = _hex(line[:4])
                vendor = v if v in wanted else None
            elif vendor is not None and not line.startswith("\t\t"):
                dev, _, name = line.strip().partition(" ")
                d = _hex(dev)
                if d is not None:
                    out[(vendor, d)] = name.strip()
        return out
    return out


# --- cards that come and go --------------------------------------------------------------

@dataclass(frozen=True)
class Tracked:
    gpu: PciGpu
    lost_since: float | None  # monotonic time it was last seen missing; None: present


def not_read_because(gpu: PciGpu) -> str:
    """Why a GPU of a collector's vendor is not one of its cards (see DeviceTracker)."""
    if gpu.virtual_function:
        return "an SR-IOV virtual function"
    return f"bound to {gpu.driver}" if gpu.driver else "no driver bound"


class DeviceTracker:
    """The GPUs bound to `drivers` (every driver when None) that are not SR-IOV virtual
    functions; rediscovered on an interval, with a grace period for cards that vanish.

    `devices()` returns every card to report: present ones (`lost_since is None`) and
    those missing for less than `grace_seconds` (report them as down). A card that comes
    back within the grace period is simply present again. `others` are the GPUs of the
    vendors found at the last discovery that are not followed (another driver, none,
    a VF), for the collector to say why."""

    def __init__(
        self,
        sysfs: str | Path,
        vendors: Iterable[Vendor],
        interval_seconds: float = 30.0,
        grace_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        drivers: Iterable[str] | None = None,
    ) -> None:
        self.sysfs = Path(sysfs)
        self.vendors = frozenset(vendors)
        self.drivers = None if drivers is None else frozenset(drivers)
        self.interval = interval_seconds
        self.grace = grace_seconds
        self._clock = clock
        self._tracked: dict[str, Tracked] = {}
        self._last: float | None = None
        self.others: list[PciGpu] = []

    def _wanted(self, gpu: PciGpu) -> bool:
        return not gpu.virtual_function and (
            self.drivers is None or gpu.driver in self.drivers)

    def refresh(self, force: bool = False) -> None:
        now = self._clock()
        if not force and self._last is not None and now - self._last < self.interval:
            return
        self._last = now
        found = discover(self.sysfs, self.vendors)
        seen = {a: g for a, g in found.items() if self._wanted(g)}
        self.others = [g for a, g in found.items() if a not in seen]
        tracked: dict[str, Tracked] = {}
        for address, gpu in seen.items():
            tracked[address] = Tracked(gpu, None)
        for address, old in self._tracked.items():
            if address in seen:
                continue
            since = old.lost_since if old.lost_since is not None else now
            if now - since < self.grace:
                tracked[address] = Tracked(old.gpu, since)
        self._tracked = dict(sorted(tracked.items()))

    def mark_lost(self, address: str) -> None:
        """A read found the card gone before rediscovery did."""
        old = self._tracked.get(address)
        if old is not None and old.lost_since is None:
            self._tracked[address] = Tracked(old.gpu, self._clock())

    def devices(self) -> list[Tracked]:
        self.refresh()
        return list(self._tracked.values())


def drm_card_addresses(sysfs: str, drivers: Iterable[str]) -> frozenset[str]:
    """PCI addresses of the DRM cards (`class/drm/cardN`, not their connectors) bound to
    one of `drivers`."""
    wanted = frozenset(drivers)
    out = set()
    for card in Path(sysfs, "class", "drm").glob("card[0-9]*"):
        if "-" in card.name:
            continue  # a connector (card0-DP-1)
        uevent = read_uevent(card / "device" / "uevent")
        pci = normalize_pci_address(uevent.get("PCI_SLOT_NAME", ""))
        if uevent.get("DRIVER") in wanted and pci:
            out.add(pci)
    return frozenset(out)
