"""One NVML stack for the whole process, shared by the nvidia and processes collectors:
one nvmlInit, one discovery of GPUs and MIG devices, one XID listener, one place that
starts NVML again after the driver went away, and one list of the GPUs this exporter is
given (`GivenGpus`), so that a GPU NVML cannot read is still reported, down.

NVML is one library per process, so the stack is too: collectors `attach()` and
`detach()`; the last one out shuts NVML down. Each collector reads its GPUs' values
through its own `sources.library.lanes.Lanes`; the GPUs' process lists, which more than
one collector needs, are read once a scrape in the stack's own lanes (`process_lanes`,
see `process_reads`).

Discovery runs on one worker per GPU under a deadline: a GPU that hangs while being
identified delays neither start-up nor scrapes, and is identified once it answers. A GPU
that cannot be read (lost before the exporter started, not initialised by the driver,
hung) is retried every --collector.retry-interval; NVML is started again when the
driver has brought back a GPU that NVML did not count.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field
from functools import partial

import pynvml

from gpu_exporter.model.features import Availability
from gpu_exporter.model.records import GpuIdentity, HealthState
from gpu_exporter.model.settings import Option, Settings
from gpu_exporter.model.worker import Busy, Job, Worker
from gpu_exporter.readers.procfs.nvidia_driver import DriverGpu, DriverGpus, read_driver_gpus
from gpu_exporter.readers.sysfs.nvidia_bus import BusGpus, read_bus_gpus
from gpu_exporter.sources.library.lanes import Lanes
from gpu_exporter.sources.nvml.calls import (
    FIX_CHECK,
    FIX_DRIVER,
    GONE,
    NvmlGone,
    NvmlUnavailable,
    init_failure,
    text,
)
from gpu_exporter.sources.nvml.devices import IdentityUnreadable, NvmlDevice, discover
from gpu_exporter.sources.nvml.events import XidListener
from gpu_exporter.sources.nvml.processes import DeviceProcesses, UtilizationSampler

log = logging.getLogger("gpu_exporter.nvidia")

DEVFS = Option(
    "nvidia.devfs", str, "/dev",
    "Where the NVIDIA device nodes are (/dev/nvidia<minor>): a GPU the driver lists "
    "(--path.procfs) without its node here belongs to another container and is not "
    "expected.")
PCI = Option(
    "collector.nvidia.pci", bool, True,
    "Report NVIDIA GPUs on the PCI bus that the NVIDIA driver does not expose (no driver "
    "loaded, the driver not bound to the card) as hw_gpu_up 0 and hw_status failed, by PCI "
    "address. --no-collector.nvidia.pci: hosts that have NVIDIA GPUs without the NVIDIA "
    "driver on purpose.", is_flag=True)
# Reading the driver's procfs files asks the driver; should that hang, a scrape waits
# this long at most (and later ones not at all until it returns).
_DRIVER_READ_SECONDS = 0.25


class StackBusy(Exception):
    """Another collector is starting NVML and a call of it has not returned in time."""


@dataclass
class Session:
    """One nvmlInit ... nvmlShutdown."""

    generation: int
    version: str | None
    count: int  # GPUs NVML counts
    events: XidListener
    devices: dict[int, NvmlDevice] = field(default_factory=dict)  # identified, by index
    # Counted but not identified: NVML index -> why (None: its discovery has not returned)
    pending: dict[int, IdentityUnreadable | None] = field(default_factory=dict)
    seen_pci: dict[int, str] = field(default_factory=dict)  # index -> PCI address read
    gone: bool = False
    # UUIDs that more than one GPU reports -> their NVML indexes (see `distinct`)
    shared_uuids: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def summary(self) -> str:
        migs = sum(len(d.migs) for d in self.devices.values())
        shared = "; ".join(shared_uuid_message(u, i, self.devices)
                           for u, i in sorted(self.shared_uuids.items()))
        return (f"{len(self.devices)} GPU(s)" + (f", {migs} MIG device(s)" if migs else "")
                + (f", {len(self.pending)} not identified yet" if self.pending else "")
                + (f", driver {self.version}" if self.version else "")
                + (f"; {shared}" if shared else ""))


@dataclass(frozen=True)
class Missing:
    """A GPU this exporter is given but cannot read: reported `hw_gpu_up 0`, by its PCI
    address, or by its NVML index alone where neither NVML, the driver nor the bus gave
    one."""

    key: str  # for the failure's log-once key
    identity: GpuIdentity | None
    state: HealthState | None  # failed: lost or not initialised; None: unknown (hung)
    message: str


class GivenGpus:
    """The GPUs this exporter is given, whether NVML reads them or not: the driver's list
    (read on a worker of its own), the PCI bus's NVIDIA GPUs the driver does not expose
    and the identities read earlier in this process; from them, the GPUs that cannot be
    read (`missing`) and the `nvidia.pci` state."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._devfs = settings.get(DEVFS)
        self._driver_worker = Worker("nvidia-driver")
        self._driver_job: Job[DriverGpus | None] | None = None
        self.driver: DriverGpus | None = None  # the last read of the driver's list
        self.bus = BusGpus()  # the PCI bus's NVIDIA GPUs the driver does not expose
        self.known: dict[str, GpuIdentity] = {}  # identities read, by PCI address

    def unresolved(self, session: Session) -> bool:
        if session.pending or self.bus.failed:
            return True
        identified = self.identified(session)
        return any(g.pci_address not in identified for g in self.driver_gpus())


    def missing(self, session: Session | None,
                view: tuple[dict[int, IdentityUnreadable | None], dict[int, NvmlDevice]]
                | None = None) -> list[Missing]:
        """The GPUs this exporter is given that it cannot read: counted by NVML but not
        identified, or listed by the driver only. gpu_index: the NVML index when NVML
        counts the GPU, else after the GPUs NVML counts, in PCI order. `view`: the
        session's (pending, devices) as the caller read its GPUs (`view()`), so that a GPU
        identified since is reported in this scrape as what the caller saw."""
        if session is not None and view is None:
            view = NvmlStack.view(session)
        pending, devices = view if view is not None else ({}, {})
        pending = {i: why for i, why in pending.items() if i not in devices}
        identified = {d.identity.pci_address for d in devices.values()
                      if d.identity.pci_address is not None}
        seen = dict(session.seen_pci) if session is not None else {}
        unmatched = [g for g in self.driver_gpus()
                     if g.pci_address not in identified and g.pci_address not in seen.values()]
        blind = sorted(i for i in pending if i not in seen)
        # Without the driver's list (no /proc/driver/nvidia here), the PCI bus's GPUs
        # bound to the NVIDIA driver are the candidates.
        candidates = [g.pci_address for g in unmatched] if self.driver is not None else [
            a for a in self.bus.bound if a not in identified and a not in seen.values()]
        if blind and len(blind) == len(candidates):
            # NVML numbers GPUs in PCI order: the unidentified ones are the unmatched.
            seen.update(zip(blind, candidates, strict=True))
            unmatched = []
        driver = {g.pci_address: g for g in self.driver_gpus()}
        out = []
        for index, why in sorted(pending.items()):
            pci = seen.get(index)
            message = str(why) if why is not None else (
                f"NVIDIA device {index} has not answered its identity (a call hangs)")
            state: HealthState | None = "failed" if why is not None and why.lost else None
            # Without a PCI address (no driver list, no bus to name it) it is still
            # reported, by its NVML index: its gpu_index stays, the others' do not shift.
            identity = self._identity(session, pci, (index,),
                                      driver.get(pci) if pci is not None else None)
            out.append(Missing(f"gpu{index}", identity, state, message))
        after = session.count if session is not None else 0
        for g in unmatched:
            out.append(Missing(
                g.pci_address, self._identity(session, g.pci_address, (after, g.pci_address), g),
                "failed" if session is not None else None,
                f"NVIDIA GPU {g.pci_address} is listed by the driver but NVML does not count "
                f"it: the driver could not initialise it ({FIX_CHECK})"))
        if self._settings.get(PCI):
            for b in self.bus.failed:
                if b.pci_address in identified:
                    continue
                identity = self._identity(session, b.pci_address, (after, b.pci_address), None)
                if not identity.name and b.name:
                    identity = dataclasses.replace(identity, name=b.name)
                out.append(Missing(b.pci_address, identity, "failed",
                                   f"NVIDIA GPU {b.pci_address} is on the PCI bus but not "
                                   f"exposed: {b.reason}"))
        return out


    def _identity(self, session: Session | None, pci: str | None,
                  order_key: tuple[int | str, ...], g: DriverGpu | None) -> GpuIdentity:
        """What is known of a GPU that cannot be read: its identity read earlier in this
        process, else what the driver lists (a UUID only once the driver has one); with
        no PCI address, its NVML index alone (`order_key`)."""
        known = self.known.get(pci) if pci is not None else None
        if known is not None:
            return dataclasses.replace(known, order_key=order_key)
        version = session.version if session is not None else None
        return GpuIdentity(
            hw_id=g.uuid if g else None, name=(g.name if g else None) or "", vendor="nvidia",
            pci_address=pci, order_key=order_key,
            driver_version=version or (self.driver.version if self.driver else None),
            firmware_version=g.firmware_version if g else None)

    @staticmethod
    def identified(session: Session | None) -> set[str]:
        if session is None:
            return set()
        return {d.identity.pci_address for d in session.devices.values()
                if d.identity.pci_address is not None}

    def uncounted(self, session: Session) -> frozenset[str]:
        """GPUs the driver has initialised (it shows their UUID) while NVML counts fewer
        GPUs than the driver lists and has not identified them."""
        driver = self.driver_gpus()
        if session.count >= len(driver):
            return frozenset()
        identified = self.identified(session)
        return frozenset(g.pci_address for g in driver
                         if g.uuid and g.pci_address not in identified)

    def driver_gpus(self) -> tuple[DriverGpu, ...]:
        return self.driver.gpus if self.driver is not None else ()

    def read_driver(self, deadline: float) -> None:
        """The driver's list, read on its own worker: a read that hangs keeps the last."""
        if self._driver_job is None or self._driver_job.done.is_set():
            with contextlib.suppress(Busy):
                self._driver_job = self._driver_worker.submit(partial(
                    read_driver_gpus, self._settings.procfs, self._devfs,
                    self._settings.sysfs))
        job = self._driver_job
        if job is not None and job.wait(min(deadline - time.monotonic(), _DRIVER_READ_SECONDS)):
            try:
                self.driver = job.outcome()
            except OSError as exc:
                log.warning("reading the NVIDIA driver's GPU list: %s", exc)

    def read_bus(self, *, nvml_up: bool) -> None:
        """The PCI bus's NVIDIA GPUs, against the driver's list (sysfs only: the driver is
        not asked)."""
        if not self._settings.get(PCI):
            return
        try:
            self.bus = read_bus_gpus(self._settings.sysfs, self.driver, nvml_up=nvml_up)
        except OSError as exc:
            log.warning("reading the PCI bus for NVIDIA GPUs: %s", exc)


    def bus_state(self) -> Availability:
        """`nvidia.pci`: NVIDIA GPUs of the PCI bus the driver does not expose, and why."""
        if not self._settings.get(PCI):
            return Availability.disabled("turned off by --no-collector.nvidia.pci",
                                         "--collector.nvidia.pci turns it on")
        went = "; ".join(f"{b.pci_address} {b.reason}" for b in self.bus.elsewhere)
        if not self.bus.failed:
            return Availability.enabled(
                "every NVIDIA GPU on the PCI bus is exposed by the driver"
                + (f" or bound elsewhere: {went}" if went else ""))
        no_driver = any("not loaded" in b.reason for b in self.bus.failed)
        by_reason: dict[str, list[str]] = {}
        for b in self.bus.failed:
            by_reason.setdefault(b.reason, []).append(b.pci_address)
        return Availability.unavailable(
            "NVIDIA GPU(s) on the PCI bus the driver does not expose, read as hw_gpu_up 0: "
            + "; ".join(f"{why}: {', '.join(gpus)}" for why, gpus in by_reason.items())
            + (f"; elsewhere: {went}" if went else ""),
            (FIX_DRIVER if no_driver else f"{FIX_CHECK}; a card that stays unbound after "
             "a reboot is faulty") + "; a host without the NVIDIA driver on purpose: "
            "--no-collector.nvidia.pci")


    def close(self) -> None:
        self._driver_worker.stop()


class NvmlStack:
    """The NVML session (nvmlInit ... nvmlShutdown, started again when due) and the
    discovery of its GPUs on one worker per GPU; `gpus` holds the GPUs it is given,
    readable or not."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self.current: Session | None = None  # read without the lock: a snapshot
        self.unavailable: NvmlUnavailable | None = None  # why there is no session
        self._last_attempt = -float("inf")
        self._last_check = -float("inf")
        self._generation = 0
        self._jobs: dict[int, Job[NvmlDevice]] = {}  # discovery, by NVML index
        self._submitted: dict[int, float] = {}  # when each of those jobs was submitted
        # Kept across sessions: a worker stuck in a hung call stays busy (and its GPU
        # unidentified) instead of a second thread being started beside it.
        self._workers: dict[int, Worker] = {}
        self.gpus = GivenGpus(settings)
        self._uncounted_known: frozenset[str] = frozenset()
        self.users = 0
        # Every GPU's process lists, read once a scrape for every collector that needs
        # them (`process_reads`), in lanes of their own; and the processes collector's
        # utilization sampling, lent while it runs, read in the same job as the lists.
        self.process_lanes: Lanes[int, DeviceProcesses] = Lanes("nvml-processes")
        self.utilization: UtilizationSampler | None = None

    # -- the session -------------------------------------------------------------------
    def session(self, deadline: float, *, force: bool = False, wait: bool = False) -> Session:
        """The live session, started (`force`: now; else when a retry is due) or
        checked for GPUs to retry. `wait`: wait for discovery until `deadline`.
        Raises NvmlUnavailable (why, and the fix), StackBusy."""
        if not self._lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise StackBusy("NVML is being started by another collector and has not "
                            "answered in time")
        try:
            now = time.monotonic()
            session = self.current
            if session is not None and session.gone:
                self._stop()
                session = None
            retry_due = now - self._last_attempt >= self._settings.retry_interval_seconds
            if session is None:
                if not (force or retry_due):
                    assert self.unavailable is not None
                    raise self.unavailable
                session = self._start(deadline)
            elif (self.gpus.unresolved(session) and now - self._last_check
                    >= self._settings.retry_interval_seconds):
                session = self._check(session, deadline)
            self._harvest(session)
        finally:
            self._lock.release()
        if wait:
            self.settle(session, deadline)
        return session

    def steady(self) -> bool:
        """True when `session()` would make no NVML call on its caller's thread now: a
        live session, and no retry of a missing GPU due (either would call nvmlInit or
        nvmlDeviceGetCount there, which hang on a GPU that fell off the bus). Every
        per-GPU call runs in lanes, with a deadline of its own."""
        session = self.current
        if session is None or session.gone:
            return False
        return not (self.gpus.unresolved(session) and time.monotonic() - self._last_check
                    >= self._settings.retry_interval_seconds)

    def _start(self, deadline: float) -> Session:
        self._last_attempt = self._last_check = time.monotonic()
        self.gpus.read_driver(deadline)
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            self.unavailable = init_failure(exc)
            self.gpus.read_bus(nvml_up=False)
            raise self.unavailable from None
        self.gpus.read_bus(nvml_up=True)
        try:
            count = int(pynvml.nvmlDeviceGetCount())
            version = text(pynvml.nvmlSystemGetDriverVersion)
            events = XidListener()
            events.start()
        except pynvml.NVMLError as exc:
            _shutdown()
            self.unavailable = (init_failure(exc) if exc.value in GONE else NvmlUnavailable(
                f"cannot count NVIDIA devices: {exc}"))
            raise self.unavailable from None
        except NvmlGone as exc:
            _shutdown()
            self.unavailable = exc
            raise
        self._generation += 1
        session = Session(self._generation, version, count, events,
                          pending=dict.fromkeys(range(count)))
        if count == 0 and not self.gpus.driver_gpus() and not self.gpus.bus.failed:
            events.stop()
            _shutdown()
            self.unavailable = NvmlUnavailable(
                "NVML lists no NVIDIA GPU",
                "check nvidia-smi; in a container, ask for GPUs (docker run --gpus all, "
                "NVIDIA_VISIBLE_DEVICES, Kubernetes resource nvidia.com/gpu)")
            raise self.unavailable
        self.current = session
        self.unavailable = None
        self._uncounted_known = self.gpus.uncounted(session)
        self._jobs.clear()
        self._submit(session)
        return session

    def _stop(self) -> None:
        session, self.current = self.current, None
        if session is not None:
            session.events.stop()
            for dev in session.devices.values():
                if dev.gpm is not None:
                    dev.gpm.close()
            _shutdown()
        self._jobs.clear()

    def restart(self, deadline: float) -> Session:
        """NVML started again (caller holds the lock)."""
        self._stop()
        return self._start(deadline)

    def lost(self, session: Session, exc: NvmlGone) -> bool:
        """NVML stopped answering in `session`: True when that is news (the session was
        the live one; it is started again when a retry is due)."""
        with self._lock:
            if session is not self.current or session.gone:
                return False
            session.gone = True
            self.unavailable = exc
            self._last_attempt = time.monotonic()
            return True


    def _check(self, session: Session, deadline: float) -> Session:
        """Every retry interval while a GPU is missing: NVML started again when it counts
        a different number of GPUs or the driver initialised one NVML did not count;
        discovery tried again for GPUs NVML counts but could not identify."""
        self._last_check = time.monotonic()
        self.gpus.read_driver(deadline)
        self.gpus.read_bus(nvml_up=True)
        try:
            count = int(pynvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as exc:
            if exc.value in GONE:
                session.gone = True
                self.unavailable = NvmlGone(str(exc))
                raise self.unavailable from None
            return session
        # NVML counts GPUs when it starts: one the driver initialised since (its UUID now
        # shown) is seen only by starting NVML again.
        uncounted = self.gpus.uncounted(session)
        recovered = uncounted - self._uncounted_known
        self._uncounted_known = uncounted
        if count != session.count or recovered:
            log.info("NVIDIA GPUs changed (NVML counts %d, was %d; initialised by the driver "
                     "since: %s): starting NVML again", count, session.count,
                     ", ".join(sorted(recovered)) or "none")
            return self.restart(deadline)
        self._submit(session)
        return session

    def _submit(self, session: Session) -> None:
        for index in sorted(session.pending):
            if index in self._jobs:
                continue  # still running, from an earlier attempt
            worker = self._workers.get(index)
            if worker is None:
                worker = self._workers[index] = Worker(f"nvidia-{index}")
            # Busy: stuck in a call of an earlier session, tried again later.
            with contextlib.suppress(Busy):
                self._jobs[index] = worker.submit(partial(
                    discover, index, session.version, session.events, session.seen_pci,
                    self._settings))
                self._submitted[index] = time.monotonic()

    def _harvest(self, session: Session) -> None:
        """Moves finished discovery into `session` (caller holds the lock). The maps are
        replaced, not changed: collectors iterate them without the lock."""
        devices, pending = dict(session.devices), dict(session.pending)
        for index, job in list(self._jobs.items()):
            if not job.done.is_set():
                continue
            del self._jobs[index]
            try:
                dev = job.outcome()
            except IdentityUnreadable as exc:
                pending[index] = exc
                continue
            except NvmlGone as exc:
                session.gone = True
                self.unavailable = exc
                continue
            except Exception as exc:  # a bug on one GPU must not hide the others
                pending[index] = IdentityUnreadable(index, repr(exc), lost=False)
                continue
            devices[index] = dev
            pending.pop(index, None)
        devices, session.shared_uuids = distinct(devices, session.events)
        for dev in devices.values():
            if dev.identity.pci_address is not None:
                self.gpus.known[dev.identity.pci_address] = dev.identity
        # devices first, then pending: a reader that takes pending, then devices (`view`)
        # sees every GPU in one of them at least.
        session.devices = devices
        session.pending = pending

    def settle(self, session: Session, deadline: float, since: float | None = None) -> None:
        """Waits until `deadline` for the discovery under way (`since`: only for what was
        submitted at or after it: a scrape waits for the discovery it started, NVML
        started again or a GPU tried again, never again for one that hung before)."""
        for index, job in list(self._jobs.items()):
            if since is None or self._submitted.get(index, since) >= since:
                job.wait(deadline - time.monotonic())
        with self._lock:
            if session is self.current:
                self._harvest(session)


    @staticmethod
    def view(session: Session) -> tuple[dict[int, IdentityUnreadable | None],
                                         dict[int, NvmlDevice]]:
        """(pending, devices) of the session, read in that order: a GPU whose discovery
        is harvested meanwhile is in devices (and is left out of pending by `missing`)."""
        pending = session.pending
        return pending, session.devices

    def nvml_state(self) -> Availability:
        session = self.current
        if session is not None and not session.gone:
            return Availability.enabled(session.summary())
        why = self.unavailable or NvmlUnavailable("NVML not started yet")
        return Availability.unavailable(why.reason, why.fix)

    def close(self) -> None:
        with self._lock:
            if self.current is not None:
                self.current.events.stop(wait=XidListener.WAIT_MS / 1000.0 + 0.5)
            self._stop()
        for worker in self._workers.values():
            worker.stop()
        self.process_lanes.close()
        self.gpus.close()
        self._workers.clear()


def distinct(devices: dict[int, NvmlDevice], events: XidListener | None = None
             ) -> tuple[dict[int, NvmlDevice], dict[str, tuple[int, ...]]]:
    """GPUs that report the same UUID (a board or driver fault; a UUID is meant to be
    unique) are told apart: each of them is known by `<UUID>@<PCI address>` (its NVML
    index where it has no address) as its hw_id, so that neither hides the other's
    series. Returns the devices and the shared UUIDs with the indexes reporting them."""
    by_uuid: dict[str, list[int]] = {}
    for index, dev in sorted(devices.items()):
        if dev.uuid:
            by_uuid.setdefault(dev.uuid, []).append(index)
    shared = {u: tuple(ix) for u, ix in by_uuid.items() if len(ix) > 1}
    out = dict(devices)
    for uuid, indexes in shared.items():
        for index in indexes:
            dev = out[index]
            if dev.identity.hw_id != uuid:
                continue  # told apart at an earlier harvest
            hw_id = f"{uuid}@{dev.identity.pci_address or index}"
            migs = tuple(dataclasses.replace(m, identity=dataclasses.replace(
                m.identity, parent_hw_id=hw_id)) for m in dev.migs)
            if events is not None:
                events.rename(dev.handle, hw_id)
            if dev.gpm is not None:
                dev.gpm.rename(hw_id)
            out[index] = dataclasses.replace(
                dev, identity=dataclasses.replace(dev.identity, hw_id=hw_id), migs=migs)
    return out, shared


def shared_uuid_message(uuid: str, indexes: tuple[int, ...],
                        devices: dict[int, NvmlDevice]) -> str:
    gpus = ", ".join(f"{i} ({d.identity.pci_address or 'no PCI address'})"
                     for i in indexes for d in (devices.get(i),) if d is not None)
    return (f"GPUs {gpus} report the same UUID {uuid}: each is reported as "
            f"hw_id=<UUID>@<PCI address>")


def _shutdown() -> None:
    with contextlib.suppress(pynvml.NVMLError):  # already gone: nothing to release
        pynvml.nvmlShutdown()


_stack_lock = threading.Lock()
_stack: NvmlStack | None = None


def attach(settings: Settings) -> NvmlStack:
    """The process's NVML stack (made by the first collector that asks)."""
    global _stack
    with _stack_lock:
        if _stack is None:
            _stack = NvmlStack(settings)
        _stack.users += 1
        return _stack


def detach(stack: NvmlStack) -> None:
    """The last collector out shuts NVML down."""
    global _stack
    with _stack_lock:
        stack.users -= 1
        if stack.users > 0:
            return
        if _stack is stack:
            _stack = None
    stack.close()
