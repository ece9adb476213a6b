"""NVIDIA GPUs through the process's NVML stack (`gpu_exporter.sources.nvml`), read each scrape
in lanes (`sources.library.lanes`): a GPU whose NVML call hangs reads `hw_gpu_up 0` this scrape and
while the call is stuck, the others report fully, and no thread piles up.

Every GPU this exporter is given appears: one NVML cannot read (lost before the
exporter started, not initialised by the driver, hung while being identified, or NVML
itself missing while the driver lists the GPU) reads `hw_gpu_up 0` with what is known
of it, and is retried every --collector.retry-interval.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from functools import partial
from typing import ClassVar

import pynvml

from gpu_exporter.collectors.base import (
    Availability,
    Collector,
    CollectorUnavailable,
    Feature,
    Sink,
    device_features,
)
from gpu_exporter.model import catalogue as c
from gpu_exporter.model.records import GpuReading
from gpu_exporter.model.settings import Settings
from gpu_exporter.readers.sysfs import power_meter
from gpu_exporter.sources.library.lanes import Lanes
from gpu_exporter.sources.nvml import fields, nvlink, values
from gpu_exporter.sources.nvml import stack as nvml_stack
from gpu_exporter.sources.nvml.calls import FIX_CHECK, FIX_UPDATE, NvmlGone, NvmlUnavailable
from gpu_exporter.sources.nvml.devices import NvmlDevice
from gpu_exporter.sources.nvml.events import XidListener
from gpu_exporter.sources.nvml.gpm import GPM, MIN_WINDOW_SECONDS
from gpu_exporter.sources.nvml.stack import DEVFS, PCI, Session, StackBusy

log = logging.getLogger("gpu_exporter.nvidia")

# Device reads must end this long before the scrape deadline, so that collect() itself
# returns in time for the exporter to keep what it wrote.
_RETURN_MARGIN_SECONDS = 0.15
_ECC_COUNTS = ("ecc_corrected", "ecc_uncorrected")


class NvidiaCollector(Collector):
    waits_for_devices = True  # in lanes, one per GPU
    name: ClassVar[str] = "nvidia"
    help: ClassVar[str] = "NVIDIA GPUs through NVML (libnvidia-ml.so.1)."
    options = (DEVFS, nvlink.PER_LINK, GPM, PCI)

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._stack: nvml_stack.NvmlStack | None = None
        self._lanes: Lanes[int, values.DeviceResult] = Lanes("nvidia")
        self._acpi_module = False
        self._acpi_checked = 0.0  # time.monotonic() of the last look for that meter

    # -- life cycle ------------------------------------------------------------------
    def start(self) -> Availability:
        if self._stack is None:
            self._stack = nvml_stack.attach(self.settings)
        self._check_acpi_module()
        deadline = time.monotonic() + self.settings.scrape_timeout_seconds
        try:
            session = self._stack.session(deadline, force=True, wait=True)
        except StackBusy as exc:
            return Availability.unavailable(str(exc))
        except NvmlUnavailable as exc:
            missing = self._stack.gpus.missing(None)
            if not missing:
                return Availability.unavailable(exc.reason, exc.fix)
            return Availability.enabled(
                f"{len(missing)} GPU(s) known to the driver or the PCI bus, read as "
                f"hw_gpu_up 0 without NVML (see nvidia.nvml, nvidia.pci)")
        return Availability.enabled(session.summary())

    def _check_acpi_module(self) -> None:
        """The ladder (docs/node-power.md): an ACPI "Module Power Socket" meter gives the
        module rail before NVML's module scope, which is then not reported. Looked for
        again every retry interval, as the power collector looks for its meters: one
        registered after start (acpi_power_meter loaded late) must not be counted
        beside NVML's module under another id."""
        self._acpi_checked = time.monotonic()
        self._acpi_module = any(m.rail == "module" for m in
                                power_meter.find_meters(self.settings.sysfs))

    def close(self) -> None:
        if self._stack is not None:
            nvml_stack.detach(self._stack)
            self._stack = None
        self._lanes.close()

    def features(self) -> Sequence[Feature]:
        if self._stack is None:
            return ()
        out = [Feature("nvml", self._stack.nvml_state()),
               Feature("pci", self._stack.gpus.bus_state())]
        session = self._stack.current
        if session is not None and not session.gone:
            devices = [d for _, d in sorted(session.devices.items())]
            out.extend(device_features(
                "xid", {d.identity.key: _xid_state(session, d) for d in devices}))
            out.extend(device_features(
                "ecc", {d.identity.key: _ecc_state(d) for d in devices}))
            out.extend(device_features(
                "recovery_action", {d.identity.key: _recovery_state(d) for d in devices}))
            out.extend(device_features("vgpu_license", {
                d.identity.key: d.vgpu_license or Availability.unavailable("not read")
                for d in devices}))
            modules = [d for d in devices if d.module_id is not None]
            if modules:  # a superchip: the module rail (power.* has the others)
                out.append(Feature("module_power", self._module_state(modules)))
            out.extend(device_features("nvlink", {
                d.identity.key: d.nvlink or Availability.unavailable("NVLink not read")
                for d in devices}))
            if not self.settings.get(GPM):
                out.append(Feature("gpm", Availability.disabled(
                    "turned off by --no-collector.nvidia.gpm",
                    "--collector.nvidia.gpm turns it on")))
            else:
                out.extend(device_features(
                    "gpm", {d.identity.key: d.gpm.availability for d in devices
                            if d.gpm is not None}))
        return out

    def _module_state(self, modules: Sequence[NvmlDevice]) -> Availability:
        if self._acpi_module:
            return Availability.disabled(
                "the ACPI power meter's Module Power Socket gives the module rail "
                "(hw_power_watts{hw_power_rail=\"module\"}): NVML's module scope is not "
                "reported besides it (docs/node-power.md)")
        if all(fields.MODULE_POWER in d.fields.absent for d in modules):
            return Availability.unavailable(
                "NVML gives no module power scope on this superchip", FIX_UPDATE)
        ids = sorted({d.module_id for d in modules if d.module_id is not None})
        return Availability.enabled("module(s) " + ", ".join(map(str, ids)))

    # -- scrape ----------------------------------------------------------------------
    def guarded(self) -> bool:
        # Every per-GPU call runs in lanes with a deadline; only NVML's (re)start and the
        # retry of a missing GPU call it on this thread.
        return self._stack is None or not self._stack.steady()

    def collect(self, sink: Sink) -> None:
        assert self._stack is not None
        deadline = sink.deadline - _RETURN_MARGIN_SECONDS
        readings: list[GpuReading] = []
        session: Session | None
        view = None
        started = time.monotonic()
        try:
            session = self._stack.session(deadline)
        except StackBusy as exc:
            sink.fail("nvml:busy", str(exc))
            last = self._stack.current
            for dev in sorted(last.devices.values(), key=lambda d: d.index) if last else ():
                readings.extend(values.down(dev))
            session = None
        except NvmlUnavailable:
            session = None
        else:
            # The discovery this scrape started (NVML started again after a driver
            # reload, a GPU tried again) is waited for, so that its GPUs are read now;
            # a GPU whose discovery hung before is not waited for again: it is down.
            self._stack.settle(session, deadline, since=started)
            view = self._stack.view(session)
            try:
                readings = self._read(sink, session, view[1], deadline)
            except NvmlGone as exc:
                if self._stack.lost(session, exc):
                    log.info("NVML stopped answering: %s", exc)
                else:  # a session started again meanwhile by another collector
                    sink.fail("nvml:restarted", f"NVML was started again during the scrape: {exc}")
                session = None
                readings = []
        missing = self._stack.gpus.missing(session, view if session is not None else None)
        if session is None and not missing and not readings:
            why = self._stack.unavailable or NvmlUnavailable("NVML is not available")
            raise CollectorUnavailable(why.reason, why.fix)
        for m in missing:
            if session is not None:  # without NVML, nvidia.nvml says why
                sink.fail(f"{m.key}:identity", m.message)
            if m.identity is not None:
                readings.append(GpuReading(m.identity, up=False, state=m.state))
        for reading in readings:
            sink.gpu(reading)

    def _read(self, sink: Sink, session: Session, identified: dict[int, NvmlDevice],
              deadline: float) -> list[GpuReading]:
        """Every identified GPU, in lanes; raises NvmlGone."""
        events = session.events
        devices = sorted(identified.items())
        _first_gpm_window(devices, deadline)
        run = self._lanes.start([
            (index, partial(values.read, dev, events.counts(dev.identity.key),
                            events.last(dev.identity.key)))
            for index, dev in devices])
        results = run.finish(deadline)
        readings: list[GpuReading] = []
        # module id -> W: every GPU of a module reads the module's power; the first (by
        # index) gives it, so that the module is reported once, never once per GPU
        modules: dict[int, float] = {}
        for index, dev in devices:
            key = dev.identity.key
            got: tuple[GpuReading, ...] | None = None  # None: identity only (values.down)
            if index in run.busy:
                sink.fail(f"{key}:busy",
                          f"GPU {key} is still stuck in an NVML call from an earlier scrape")
            elif index not in results:
                sink.fail(f"{key}:timeout",
                          f"GPU {key} did not answer NVML within the scrape timeout")
            else:
                result, error = results[index]
                if isinstance(error, NvmlGone):
                    raise error
                if isinstance(error, Exception):  # one device's bug must not hide the others
                    sink.fail(f"{key}:{type(error).__name__}", f"reading GPU {key}: {error}")
                elif error is not None:
                    raise error
                elif result is not None:
                    got = result.readings
                    if dev.module_id is not None and result.module_power_watts is not None:
                        modules.setdefault(dev.module_id, result.module_power_watts)
                    for fkey, message in result.failures:
                        sink.fail(fkey, message)
            # The identity-only readings are made only for a GPU that did not answer: a
            # reading is a large frozen record, and eight of them a scrape showed.
            readings.extend(got if got is not None else values.down(dev))
        if modules and (time.monotonic() - self._acpi_checked
                        >= self.settings.retry_interval_seconds):
            self._check_acpi_module()
        if not self._acpi_module:
            for module, watts in sorted(modules.items()):
                c.HW_POWER.emit(sink, watts, {"hw_type": "module", "hw_id": f"module{module}",
                                              "hw_power_rail": "module"})
        for uuid, indexes in sorted(session.shared_uuids.items()):
            sink.fail(f"uuid:{uuid}", nvml_stack.shared_uuid_message(
                uuid, indexes, session.devices) + f" ({FIX_CHECK})")
        stuck = events.stuck_seconds()
        if stuck > XidListener.STUCK_SECONDS:
            sink.fail("xid:stuck", f"the NVML event wait has not returned for {stuck:.0f} s: "
                                   "XID events are not counted meanwhile")
        return readings


def _first_gpm_window(devices: Sequence[tuple[int, NvmlDevice]], deadline: float) -> None:
    """The first GPM sample is taken at discovery; a first scrape that comes sooner than
    100 ms after it waits for the rest of the window rather than reporting nothing."""
    due = max((at for _, d in devices if d.gpm is not None
               for at in (d.gpm.first_values_at(),) if at is not None), default=None)
    if due is not None:
        wait = min(due, deadline) - time.monotonic()
        if 0 < wait <= MIN_WINDOW_SECONDS:
            time.sleep(wait)


def _xid_state(session: Session, dev: NvmlDevice) -> Availability:
    api = session.events.availability
    if api.state != "enabled" or dev.xid is None:
        return api
    return dev.xid


def _recovery_state(dev: NvmlDevice) -> Availability:
    """Whether the GPU gives NVML's recovery action (hw_gpu_recovery_action)."""
    code = dev.fields.absent.get(fields.RECOVERY_ACTION)
    if code is None:
        return Availability.enabled()
    return Availability.unavailable(
        f"NVML gives no GPU recovery action on this GPU ({pynvml.NVMLError(code)}): the "
        "field needs driver R570 or newer; the reset and reboot alerts then decide by the "
        "XID's catalog action alone",
        "update the NVIDIA driver to R570 or newer (Hopper and newer GPUs report it)")


def _ecc_state(dev: NvmlDevice) -> Availability:
    ecc = dev.ecc or Availability.unavailable("ECC mode not read")
    absent = dev.fields.absent
    if ecc.state == "enabled" and all(name in absent for name in _ECC_COUNTS):
        why = ", ".join(sorted({str(pynvml.NVMLError(absent[n])) for n in _ECC_COUNTS}))
        return Availability.unavailable(
            f"ECC is on, but NVML gives no ECC error counts ({why})", FIX_UPDATE)
    return ecc
