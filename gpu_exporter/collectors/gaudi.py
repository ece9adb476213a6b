"""Habana Labs' Gaudi accelerators through HLML (`gpu_exporter.sources.hlml`), the same
hw_gpu_* families as every vendor. What is read, and from which release: docs/gaudi.md.

Every Gaudi on the PCI bus bound to habanalabs is reported (`SysfsGpuCollector`: vendor
0x1da3, processing-accelerator class): one HLML does not list, one whose call hangs, and
all of them while the library cannot be had, read `hw_gpu_up 0` and `hw_status` failed,
by PCI address, and are read again every --collector.retry-interval. Without the binding
or the library the `gaudi.hlml` feature is unavailable with the fix, and the rest of the
exporter runs on.

HLML calls run in per-device lanes (`sources.library.lanes`, as NVML's): a device whose
call hangs costs only itself, this scrape and while the call is stuck.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from gpu_exporter.collectors.base import Availability, Feature, Sink, device_features
from gpu_exporter.collectors.sysfs_gpus import SysfsGpuCollector
from gpu_exporter.model.records import GpuIdentity, GpuReading
from gpu_exporter.model.settings import Option, Settings
from gpu_exporter.model.worker import Busy, Worker
from gpu_exporter.readers.file_values import Problems, read_text
from gpu_exporter.readers.sysfs.pci import PciGpu, device_name
from gpu_exporter.sources.hlml import session as hlml
from gpu_exporter.sources.hlml import values
from gpu_exporter.sources.library.calls import DeviceLost
from gpu_exporter.sources.library.lanes import Lanes

HLML_LIBRARY = Option(
    "gaudi.hlml-library", str, hlml.DEFAULT_LIBRARY,
    "Path of Habana's HLML library (libhlml.so), where the habanalabs driver's tools "
    "install it by default; another path for a library installed elsewhere or mounted "
    "into a container.")
# Device reads end this long before the scrape deadline, so that collect() returns in time.
_RETURN_MARGIN_SECONDS = 0.15
_NOT_LISTED = hlml.NOT_FOUND


class GaudiCollector(SysfsGpuCollector):
    name = "gaudi"
    help = ("Habana Labs Gaudi accelerators through HLML (libhlml.so, with the optional "
            "binding habana-pyhlml): utilization, memory, power, energy, temperatures, "
            "clocks, ECC, PCIe replays.")
    vendor = "habana"
    vendor_name = "Habana Gaudi"
    vendor_id = 0x1DA3
    drivers = ("habanalabs",)
    load_driver = ("load the habanalabs kernel module (`modprobe habanalabs`) and bind the "
                   "accelerator to it")
    options = (*SysfsGpuCollector.options, HLML_LIBRARY)

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._lanes: Lanes[str, values.DeviceResult] = Lanes("gaudi")
        self._opener = Worker("gaudi-hlml-init")  # kept: a hung hlml_init stays its own
        self._session: hlml.HlmlSession | None = None
        self._hlml_state = Availability.unavailable("HLML not started")
        self._open_at = 0.0
        self._hlml_ids: dict[str, GpuIdentity] = {}  # HLML's identity, by PCI address
        self._results: dict[str, GpuReading] = {}
        self._unlisted: set[str] = set()

    # -- life cycle ------------------------------------------------------------------
    def start(self) -> Availability:
        found = super().start()
        if found.state != "enabled":
            return found
        self._open(time.monotonic() + self.settings.scrape_timeout_seconds)
        if self._session is None:
            return Availability.enabled(
                f"{found.reason}; read as hw_gpu_up 0 without HLML (see gaudi.hlml)")
        return Availability.enabled(f"{found.reason}; {self._hlml_state.reason}")

    def _open(self, deadline: float) -> None:
        """hlml_init on its own worker, never waiting past `deadline`."""
        self._open_at = time.monotonic() + self.settings.retry_interval_seconds
        path = self.settings.get(HLML_LIBRARY)
        try:
            job = self._opener.submit(partial(hlml.HlmlSession, path))
        except Busy:
            self._hlml_state = Availability.unavailable(
                "hlml_init has not returned (an earlier try still hangs)", hlml.FIX_DRIVER)
            return
        if not job.wait(max(0.0, deadline - time.monotonic())):
            self._hlml_state = Availability.unavailable(
                "hlml_init did not return within the scrape timeout", hlml.FIX_CHECK)
            return
        try:
            self._session = job.outcome()
        except hlml.HlmlUnavailable as exc:
            self._hlml_state = Availability.unavailable(exc.reason, exc.fix)
            return
        except Exception as exc:  # the binding's own error at start-up (HLMLError)
            self._hlml_state = Availability.unavailable(f"HLML start failed: {exc}",
                                                        hlml.FIX_CHECK)
            return
        s = self._session
        self._hlml_state = Availability.enabled(
            f"HLML {s.hlml_version or '(version unknown)'} from {path}, driver "
            f"{s.driver_version or '(version unknown)'}, {s.count} device(s), binding "
            f"habana-pyhlml {hlml.binding_version() or '(version unknown)'}")

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
        self._lanes.close()
        self._opener.stop()

    def features(self) -> Sequence[Feature]:
        out = [Feature("hlml", self._hlml_state)]
        if self._session is not None and self._unlisted:
            out.extend(device_features("device", {
                address: Availability.unavailable(
                    "HLML does not list this Gaudi", hlml.FIX_CHECK)
                for address in sorted(self._unlisted)}))
        return out

    # -- one scrape ------------------------------------------------------------------
    def before_read(self, gpus: list[PciGpu], sink: Sink) -> None:
        self._results = {}
        if self._session is None and gpus and time.monotonic() >= self._open_at:
            self._open(sink.deadline - _RETURN_MARGIN_SECONDS)
        session = self._session
        if session is None or not gpus:
            return
        run = self._lanes.start([
            (gpu.pci_address, partial(values.read, session, self._pci_identity(gpu, False),
                                      self._hlml_ids.get(gpu.pci_address)))
            for gpu in gpus])
        outcomes = run.finish(sink.deadline - _RETURN_MARGIN_SECONDS)
        for gpu in gpus:
            address = gpu.pci_address
            if address in run.busy or address not in outcomes:
                sink.fail(address, f"{address}: an HLML call has not returned (hung)")
                continue
            result, error = outcomes[address]
            if result is not None:
                self._unlisted.discard(address)
                self._hlml_ids.setdefault(address, result.reading.identity)
                self._results[address] = result.reading
                for key, message in result.failures:
                    sink.fail(key, message)
            elif isinstance(error, session.codes.error) and getattr(
                    error, "value", None) == _NOT_LISTED:
                self._unlisted.add(address)
            elif isinstance(error, hlml.HlmlGone):
                self._gone(error)
                return
            elif isinstance(error, DeviceLost):
                sink.fail(address, f"{address}: lost ({error})")
            else:
                sink.fail(address, f"{address}: {error}")

    def _gone(self, error: hlml.HlmlGone) -> None:
        """The library stopped answering as a whole: every device reads down until a new
        session is had (tried every retry interval)."""
        if self._session is not None:
            self._session.close()
        self._session = None
        self._hlml_state = Availability.unavailable(error.reason, error.fix)
        self._results = {}
        self._open_at = time.monotonic() + self.settings.retry_interval_seconds

    def identity(self, gpu: PciGpu, sysfs: Path, answered: bool) -> GpuIdentity:
        known = self._hlml_ids.get(gpu.pci_address)
        if answered and known is not None:
            return known
        return self._pci_identity(gpu, answered)

    def _pci_identity(self, gpu: PciGpu, answered: bool) -> GpuIdentity:
        """What the bus shows of a Gaudi HLML has not answered for: no hw_id (HLML's UUID
        is its id), the name pci.ids gives, the driver's module version."""
        pci_name = device_name(gpu.vendor_id, gpu.device_id)
        ids = f"{gpu.vendor_id:04x}:{gpu.device_id:04x}" if gpu.device_id is not None else ""
        driver_version = None
        if gpu.driver:
            driver_version = read_text(Path(self.settings.sysfs, "module", gpu.driver,
                                            "version"))
        return GpuIdentity(
            hw_id=None, name=pci_name or f"Habana Gaudi {ids}".strip(), vendor="habana",
            pci_address=gpu.pci_address, order_key=(0 if answered else 1, gpu.pci_address),
            model=pci_name or ids or None, driver_version=driver_version)

    def read(self, gpu: PciGpu, ident: GpuIdentity, problems: Problems) -> GpuReading:
        got = self._results.get(gpu.pci_address)
        if got is None:
            return GpuReading(identity=ident, up=False, state="failed")
        return got

    def keep_only(self, pci_addresses: set[str]) -> None:
        for address in [a for a in self._hlml_ids if a not in pci_addresses]:
            del self._hlml_ids[address]
        self._unlisted &= pci_addresses
