"""What the amd and intel collectors share: PCI discovery on an interval, a grace period
for cards that vanish, cards that do not answer retried every --collector.retry-interval,
one card at a time within the scrape deadline. Not a collector itself (not registered).

Every card bound to the collector's driver is reported, readable or not: a card that
has never answered in this process (lost before the exporter started) is `hw_gpu_up 0`
with its PCI address, a gpu_index after the cards of its vendor that answered, and a
hw_id only where a source gives one (see the readers' `identity`). It is read again
every retry interval and reported in full from the first read it answers, no restart.
"""

from __future__ import annotations

import os
import time
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from gpu_exporter.collectors.base import Availability, Collector, Sink
from gpu_exporter.model import flagtypes
from gpu_exporter.model.records import GpuIdentity, GpuReading, Vendor
from gpu_exporter.model.settings import Option
from gpu_exporter.readers.file_values import Problems, listing
from gpu_exporter.readers.sysfs import pcie
from gpu_exporter.readers.sysfs.pci import DeviceTracker, PciGpu, not_read_because

# Shared by every collector that uses PCI discovery: one flag each, whichever of them
# are registered.
DISCOVERY_INTERVAL = Option(
    "discovery.interval", flagtypes.Seconds(0.1, 86400), 30.0,
    "Seconds between PCI rediscoveries of AMD and Intel GPUs (cards that appear are "
    "reported without a restart).")
DISCOVERY_GRACE = Option(
    "discovery.grace-period", flagtypes.Seconds(0.1, 604800), 300.0,
    "Seconds a vanished AMD or Intel GPU keeps reporting hw_gpu_up 0 before it is dropped.")
SYSFS_FIX = ("in a container, mount the host's /sys (read-only) and pass "
             "--path.sysfs=<that mount>")


class SysfsGpuCollector(Collector):
    vendor: Vendor
    options: ClassVar[Sequence[Option[Any]]] = (DISCOVERY_INTERVAL, DISCOVERY_GRACE)
    vendor_name: str  # as people write it: "AMD"
    vendor_id: int
    drivers: tuple[str, ...]  # the kernel drivers whose cards this collector reads
    load_driver: str  # the fix when no card is bound to them

    def start(self) -> Availability:
        self._tracker = DeviceTracker(
            self.settings.sysfs, (self.vendor,),
            interval_seconds=self.settings.get(DISCOVERY_INTERVAL),
            grace_seconds=self.settings.get(DISCOVERY_GRACE),
            drivers=self.drivers,
        )
        self._known: dict[str, GpuIdentity] = {}  # cards that answered in this process
        self._unread: dict[str, GpuIdentity] = {}  # cards that have not, as PCI shows them
        self._retry_at: dict[str, float] = {}  # cards that did not answer: when to read
        self._pcie = pcie.PcieReader(self.settings.get(DISCOVERY_INTERVAL))
        self._tracker.refresh(force=True)
        found = self._tracker.devices()
        if not found:
            return self._none_found()
        cards = ", ".join(f"{t.gpu.pci_address} ({t.gpu.card or 'no DRM card'}, "
                          f"{t.gpu.driver}{'; cannot be read' if t.gpu.unreadable else ''})"
                          for t in found)
        return Availability.enabled(f"{len(found)} GPU(s): {cards}{self._others()}")

    def _others(self) -> str:
        if not self._tracker.others:
            return ""
        return "; not read: " + ", ".join(
            f"{g.pci_address} ({not_read_because(g)})" for g in self._tracker.others)

    def _none_found(self) -> Availability:
        sysfs = self.settings.sysfs
        drivers = " or ".join(self.drivers)
        if not listing(Path(sysfs, "bus", "pci", "devices")) and not listing(
                Path(sysfs, "class", "drm")):
            return Availability.unavailable(
                f"{sysfs}/bus/pci/devices cannot be listed: {sysfs} is not the host's sysfs",
                f"pass --path.sysfs=<the host's /sys>; {SYSFS_FIX}")
        if self._tracker.others:
            return Availability.unavailable(
                f"no {self.vendor_name} GPU bound to {drivers}"
                + self._others().replace("; not read", ""),
                f"{self.load_driver}; a GPU bound to vfio-pci is passed through to a VM "
                "and is read there")
        return Availability.unavailable(
            f"no {self.vendor_name} GPU (PCI vendor {self.vendor_id:#06x}, display or "
            f"accelerator class) under {sysfs}/bus/pci/devices",
            f"on a host with {self.vendor_name} GPUs: {self.load_driver}; {SYSFS_FIX}; "
            f"on a host without: --no-collector.{self.name}")

    def collect(self, sink: Sink) -> None:
        tracked = self._tracker.devices()
        addresses = {t.gpu.pci_address for t in tracked}
        for state in (self._known, self._unread, self._retry_at):
            for address in [a for a in state if a not in addresses]:
                del state[address]
        self.keep_only(addresses)
        self._pcie.keep_only(addresses)
        live = [t.gpu for t in tracked if t.lost_since is None]
        self.before_read(live, sink)
        now = time.monotonic()
        readings = []
        for t in tracked:
            gpu = t.gpu
            if t.lost_since is not None or self._retry_at.get(gpu.pci_address, now) > now:
                readings.append(
                    GpuReading(identity=self._identity(gpu), up=False, state="failed"))
                continue
            if sink.time_left() <= 0:
                sink.fail("deadline", "scrape deadline reached before every GPU was read")
                readings.append(GpuReading(identity=self._identity(gpu), up=False))
                continue
            readings.append(self._read(gpu, sink, now))
        for reading in self._distinct(readings, sink):
            sink.gpu(reading)

    def _distinct(self, readings: list[GpuReading], sink: Sink) -> list[GpuReading]:
        """Cards that report the same id (`unique_id`: a board fault, or boards that
        were never given one properly) are told apart: each is reported with
        hw_id=<id>@<PCI address>, so that neither hides the other's series; a failure
        names them every scrape."""
        by_id: dict[str, list[str]] = {}
        for r in readings:
            if r.identity.hw_id is not None and r.identity.pci_address is not None:
                by_id.setdefault(r.identity.hw_id, []).append(r.identity.pci_address)
        shared = {hw_id: pcis for hw_id, pcis in by_id.items() if len(pcis) > 1}
        for hw_id, pcis in sorted(shared.items()):
            sink.fail(f"hw_id:{hw_id}", (
                f"{self.vendor_name} GPUs {', '.join(sorted(pcis))} report the same id "
                f"{hw_id}: each is reported as hw_id=<id>@<PCI address>"))
        return [replace(r, identity=replace(
                    r.identity, hw_id=f"{r.identity.hw_id}@{r.identity.pci_address}"))
                if r.identity.hw_id in shared else r for r in readings]

    def _read(self, gpu: PciGpu, sink: Sink, now: float) -> GpuReading:
        address = gpu.pci_address
        self._unread.pop(address, None)  # what PCI shows is read afresh at each try
        ident = self._identity(gpu)
        if gpu.unreadable is not None:  # nothing of it may be opened: down, and why
            sink.fail(address, f"{address}: {gpu.unreadable}")
            self._retry_at[address] = now + self.settings.retry_interval_seconds
            return GpuReading(identity=ident, up=False, state="failed")
        problems = Problems()
        try:
            reading = self.read(gpu, ident, problems)
        except OSError as exc:  # a card that went away under us loses only itself
            sink.fail(address, f"{address}: {exc}")
            reading = GpuReading(identity=ident, up=False, state="failed")
        if reading.up:
            # every vendor's card-to-slot link and AER counters, the same way
            link = self._pcie.read(address, gpu.device_path, problems)
            reading = replace(reading, pcie_link=link.link,
                              errors={**reading.errors, **link.errors})
        for key, message in problems.items:
            sink.fail(key, message)
        if reading.up:
            self._retry_at.pop(address, None)
            if address not in self._known:
                self._known[address] = self.identity(gpu, Path(self.settings.sysfs), True)
                self._unread.pop(address, None)
                reading = replace(reading, identity=self._known[address])
            return reading
        self._retry_at[address] = now + self.settings.retry_interval_seconds
        if not os.path.isdir(gpu.device_path):
            self._tracker.mark_lost(address)  # gone before rediscovery noticed
        return reading

    def _identity(self, gpu: PciGpu) -> GpuIdentity:
        """The identity the card had when it last answered, else what PCI shows."""
        known = self._known.get(gpu.pci_address)
        if known is not None:
            return known
        unread = self._unread.get(gpu.pci_address)
        if unread is None:
            unread = self._unread[gpu.pci_address] = self.identity(
                gpu, Path(self.settings.sysfs), False)
        return unread

    def before_read(self, gpus: list[PciGpu], sink: Sink) -> None:
        """Hook: read what spans every card (e.g. DRM fdinfo) once per scrape."""

    @abstractmethod
    def identity(self, gpu: PciGpu, sysfs: Path, answered: bool) -> GpuIdentity:
        """`answered`: whether the card answered a read (else it sorts after those that
        did, and has a hw_id only if a source gives one without the card answering)."""

    @abstractmethod
    def read(self, gpu: PciGpu, ident: GpuIdentity, problems: Problems) -> GpuReading: ...

    @abstractmethod
    def keep_only(self, pci_addresses: set[str]) -> None:
        """Drop the reader's state of cards no longer followed."""
