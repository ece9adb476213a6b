"""Which processes hold a compute accelerator of the kernel's accel subsystem: the
habanalabs driver's Gaudi nodes, `/dev/accel/accel<N>` (`/dev/hl<N>` before the driver
moved to accel). The driver gives one process at a time a device's compute context, so
the process holding the node is the whole card's user: what the processes collector
charges the card to (docs/gaudi.md, "Per process"). Monitoring tools such as hl-smi
open the control node (`accel_controlD<N>`), which is not counted.

`accel_devices` maps each node's minor to its PCI address (`<sysfs>/class/accel/accel<N>`
is a link into the PCI device's folder), for the drivers asked for.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

from gpu_exporter.readers.file_values import read_uevent
from gpu_exporter.readers.sysfs.pci import normalize_pci_address

_NODE = re.compile(r"/dev/accel/accel(\d+)")


def accel_devices(sysfs: str, drivers: Iterable[str]) -> dict[int, str]:
    """Minor -> PCI address of the accel nodes whose device is bound to `drivers`."""
    wanted = frozenset(drivers)
    out: dict[int, str] = {}
    root = Path(sysfs, "class", "accel")
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return out
    for name in names:
        m = re.fullmatch(r"accel(\d+)", name)
        if m is None:
            continue  # accel_controlD<N>
        try:
            device = Path(os.path.realpath(root / name)).parent.parent
        except OSError:
            continue
        address = normalize_pci_address(device.name)
        if address is None or read_uevent(device / "uevent").get("DRIVER") not in wanted:
            continue
        out[int(m.group(1))] = address
    return out


def read_accel_holders(procfs: str = "/proc", deadline: float | None = None
                       ) -> dict[int, tuple[int, ...]]:
    """Minor -> the pids that have `/dev/accel/accel<minor>` open. Processes that vanish
    or cannot be read during the walk are skipped; with `deadline` (time.monotonic())
    the walk raises TimeoutError once it passes, never returning a partial list."""
    holders: dict[int, set[int]] = {}
    try:
        entries = os.listdir(procfs)
    except OSError:
        return {}
    for name in entries:
        if not name.isdigit():
            continue
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError("accel holders walk passed the scrape deadline")
        fd_dir = os.path.join(procfs, name, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            m = _NODE.fullmatch(target)
            if m is not None:
                holders.setdefault(int(m.group(1)), set()).add(int(name))
    return {minor: tuple(sorted(pids)) for minor, pids in sorted(holders.items())}
