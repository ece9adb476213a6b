"""The PCIe link between a GPU card and its slot, and the card's AER error counters, from
sysfs, for every vendor.

Which link: most discrete AMD and Intel cards (and NVIDIA HGX baseboards) carry a PCIe
switch of their own: the GPU function sits below the switch's downstream port, which sits
below its upstream port, which is what the slot's port is wired to. The GPU function then
reports the card-internal link (an Arc A380 says 2.5 GT/s x1 while its slot runs
16 GT/s x8). So the walk goes up the device path (`/sys/devices/pci0000:00/<root port>/
<upstream port>/<downstream port>/<gpu>`) through the PCI bridges of the GPU's own vendor
and stops below a root port (a device right under the host bridge `pciDDDD:BB`) or a
bridge of another vendor (a platform switch, the chipset): the topmost bridge of the card
is the card's end of the link; the device above it is the slot's end.

- current speed and width: the card's end (`current_link_speed`, `current_link_width`;
  both ends of a link report the same trained state);
- max speed and width: the lower of the two ends' `max_link_*` (each file tells one end's
  capability only: a Gen4 x16 card in a Gen3 x4 slot trains at most to Gen3 x4);
- errors: `aer_dev_correctable`/`aer_dev_nonfatal`/`aer_dev_fatal` (`TOTAL_ERR_*` lines)
  summed over the card's functions on that path (its switch ports and the GPU): every
  error the card detected, on the slot link and inside the card.

Units: `16.0 GT/s PCIe` (older kernels `8 GT/s`) is 16e9 transfers per second; widths are
lanes. `Unknown` speed and widths that are no PCIe width (a link that is down reads 0, a
device in D3cold all ones) are absent: the kernel does not know them either.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from gpu_exporter.model.records import ErrorType, PcieErrorType, PcieLink
from gpu_exporter.readers.file_values import Layouts, Problems, parse_int, read_text
from gpu_exporter.readers.sysfs.pci import normalize_pci_address

N = TypeVar("N", int, float)

_BRIDGE_CLASS = 0x0604  # PCI-to-PCI bridge (switch ports, root ports), class >> 8
WIDTHS = frozenset({1, 2, 4, 8, 12, 16, 32})  # what a PCIe link can train to
_SPEED = re.compile(r"(\d+(?:\.\d+)?) GT/s(?: PCIe)?")
# (file, total line) of each AER counter file, by the error type it feeds.
_AER_FILES: Mapping[PcieErrorType, tuple[str, str]] = {
    "pcie_correctable": ("aer_dev_correctable", "TOTAL_ERR_COR"),
    "pcie_nonfatal": ("aer_dev_nonfatal", "TOTAL_ERR_NONFATAL"),
    "pcie_fatal": ("aer_dev_fatal", "TOTAL_ERR_FATAL"),
}


@dataclass(frozen=True)
class PcieReading:
    link: PcieLink = field(default_factory=PcieLink)
    # pcie_correctable, pcie_nonfatal, pcie_fatal: cumulative counts
    errors: Mapping[ErrorType, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CardPath:
    """Where a GPU card sits on the PCI tree."""

    functions: tuple[Path, ...]  # the card's end of the slot link first, the GPU last
    slot: Path | None  # the port at the slot's end; None right under the host bridge

    @property
    def card_end(self) -> Path:
        return self.functions[0]


def card_path(device: Path | str) -> CardPath:
    """Walks up from the GPU's PCI device folder (any path to it: a bus/pci/devices or a
    class/drm link is resolved first) through the bridges of the card's own switch."""
    gpu = Path(os.path.realpath(device))
    vendor = _hex(read_text(gpu / "vendor"))
    functions = [gpu]
    while True:
        parent = functions[-1].parent
        if not _is_pci_device(parent):
            return CardPath(tuple(reversed(functions)), None)
        if (vendor is None or _hex(read_text(parent / "vendor")) != vendor
                or not _is_bridge(parent) or not _is_pci_device(parent.parent)):
            # a root port (right under the host bridge), a platform switch or chipset
            # port: the slot's end of the link
            return CardPath(tuple(reversed(functions)), parent)
        functions.append(parent)


def _is_pci_device(path: Path) -> bool:
    return normalize_pci_address(path.name) == path.name


def _is_bridge(path: Path) -> bool:
    klass = _hex(read_text(path / "class"))
    return klass is not None and klass >> 8 == _BRIDGE_CLASS


def _hex(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None


def read(path: CardPath, problems: Problems) -> PcieReading:
    end = path.card_end
    ends = (end,) if path.slot is None else (end, path.slot)
    maxima_width = [_width(e / "max_link_width", problems) for e in ends]
    maxima_speed = [_speed(e / "max_link_speed", problems) for e in ends]
    link = PcieLink(
        current_width_lanes=_width(end / "current_link_width", problems),
        max_width_lanes=_lowest(maxima_width),
        current_transfers_per_second=_speed(end / "current_link_speed", problems),
        max_transfers_per_second=_lowest(maxima_speed),
    )
    return PcieReading(link, aer_errors(path.functions, problems))


def _lowest(values: list[N | None]) -> N | None:
    """The lower end's maximum; one end's alone when the other does not say (a root port
    of an older kernel without max_link_* files)."""
    known = [v for v in values if v is not None]
    return min(known) if known else None


def _width(path: Path, problems: Problems) -> int | None:
    text = read_text(path)
    if text is None:
        return None
    lanes = parse_int(text, path, problems, maximum=0xFFFF)
    return lanes if lanes in WIDTHS else None


def _speed(path: Path, problems: Problems) -> float | None:
    text = read_text(path)
    if text is None or text.startswith("Unknown"):
        return None
    m = _SPEED.fullmatch(text)
    if m is None:
        problems.add(path, f"not a PCIe link speed: {text[:40]!r}")
        return None
    return float(m.group(1)) * 1e9


def aer_errors(functions: tuple[Path, ...], problems: Problems
               ) -> dict[ErrorType, int]:
    """AER totals summed over `functions`. An error type none of them reports is absent,
    and so is one whose file is garbage on any of them (a partial sum would look like a
    counter reset)."""
    out: dict[ErrorType, int] = {}
    for error_type, (name, total) in _AER_FILES.items():
        files = [(f / name, read_text(f / name)) for f in functions]
        counts = [_aer_total(path, text, total, problems)
                  for path, text in files if text is not None]
        if counts and None not in counts:
            out[error_type] = sum(c for c in counts if c is not None)
    return out


def _aer_total(path: Path, text: str, total: str, problems: Problems) -> int | None:
    """The count on the file's total line; None (and a problem) when there is none."""
    for line in text.splitlines():
        name, _, count = line.strip().partition(" ")
        if name == total:
            return parse_int(count.strip(), path, problems)
    problems.add(path, f"no {total} line")
    return None


class PcieReader:
    """Reads each card's link every scrape; where the card sits on the PCI tree is
    walked once per card and kept (`Layouts`: walked again after `relist_seconds`, a
    card reseated elsewhere)."""

    def __init__(self, relist_seconds: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._paths: Layouts[CardPath] = Layouts(relist_seconds, clock)

    def read(self, pci_address: str, device: Path, problems: Problems) -> PcieReading:
        return read(self._paths.get(pci_address, lambda: card_path(device)), problems)

    def keep_only(self, pci_addresses: set[str]) -> None:
        self._paths.keep_only(pci_addresses)
