"""What the amd and intel collectors share: PCI discovery on an interval, a grace period
for cards that vanish, one card at a time within the scrape deadline; and the one DRM
fdinfo walk of a scrape (intel, processes). Not a collector itself (not registered)."""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path

from gpu_exporter import flagtypes
from gpu_exporter.collectors.base import Availability, Collector, Sink
from gpu_exporter.readers import fdinfo
from gpu_exporter.readers.pci import DeviceTracker, PciGpu
from gpu_exporter.readers.sysfs import Problems
from gpu_exporter.records import GpuIdentity, GpuReading, Vendor
from gpu_exporter.settings import Option

# Shared by every collector that uses PCI discovery: one flag each, whichever of them
# are registered.
DISCOVERY_INTERVAL = Option(
    "discovery.interval", flagtypes.Seconds(0.1, 86400), 30.0,
    "Seconds between PCI rediscoveries of AMD and Intel GPUs (cards that appear are "
    "reported without a restart).")
DISCOVERY_GRACE = Option(
    "discovery.grace-period", flagtypes.Seconds(0.1, 604800), 300.0,
    "Seconds a vanished AMD or Intel GPU keeps reporting hw_gpu_up 0 before it is dropped.")


def drm_clients(sink: Sink, procfs: str) -> list[fdinfo.DrmClient]:
    """Every DRM client of the host (all drivers), walked once per scrape however many
    collectors ask. TimeoutError when the walk passes the scrape deadline."""
    return sink.once(("drm-fdinfo", procfs),
                     lambda: fdinfo.read_drm_clients(procfs, deadline=sink.deadline))


class SysfsGpuCollector(Collector):
    vendor: Vendor
    options = (DISCOVERY_INTERVAL, DISCOVERY_GRACE)

    def start(self) -> Availability:
        self._tracker = DeviceTracker(
            self.settings.sysfs, (self.vendor,),
            interval_seconds=self.settings.get(DISCOVERY_INTERVAL),
            grace_seconds=self.settings.get(DISCOVERY_GRACE),
        )
        self._identities: dict[str, GpuIdentity] = {}
        self._tracker.refresh(force=True)
        found = self._tracker.devices()
        if not found:
            return Availability.unavailable(
                f"no {self.vendor} GPU under {self.settings.sysfs}/bus/pci/devices")
        cards = ", ".join(
            f"{t.gpu.pci_address} ({t.gpu.card or 'no DRM card'}, {t.gpu.driver or 'no driver'})"
            for t in found)
        return Availability.enabled(f"{len(found)} GPU(s): {cards}")

    def collect(self, sink: Sink) -> None:
        tracked = self._tracker.devices()
        # A lost card keeps the identity it had (its files, unique_id included, are gone).
        known = {t.gpu.pci_address for t in tracked}
        for address in [a for a in self._identities if a not in known]:
            del self._identities[address]
        live = [t.gpu for t in tracked if t.lost_since is None]
        self.before_read(live, sink)
        for t in tracked:
            gpu = t.gpu
            ident = self._identity(gpu)
            if t.lost_since is not None:
                sink.gpu(GpuReading(identity=ident, up=False, state="failed"))
                continue
            if sink.time_left() <= 0:
                sink.fail("deadline", "scrape deadline reached before every GPU was read")
                sink.gpu(GpuReading(identity=ident, up=False))
                continue
            problems = Problems()
            try:
                reading = self.read(gpu, ident, problems)
            except OSError as exc:  # a card that went away under us loses only itself
                sink.fail(gpu.pci_address, f"{gpu.pci_address}: {exc}")
                reading = GpuReading(identity=ident, up=False, state="failed")
            if not reading.up:
                self._tracker.mark_lost(gpu.pci_address)
            for key, message in problems.items:
                sink.fail(key, message)
            sink.gpu(reading)

    def _identity(self, gpu: PciGpu) -> GpuIdentity:
        ident = self._identities.get(gpu.pci_address)
        if ident is None:
            ident = self.identity(gpu, Path(self.settings.sysfs))
            self._identities[gpu.pci_address] = ident
        return ident

    def before_read(self, gpus: list[PciGpu], sink: Sink) -> None:
        """Hook: read what spans every card (e.g. DRM fdinfo) once per scrape."""

    @abstractmethod
    def identity(self, gpu: PciGpu, sysfs: Path) -> GpuIdentity: ...

    @abstractmethod
    def read(self, gpu: PciGpu, ident: GpuIdentity, problems: Problems) -> GpuReading: ...
