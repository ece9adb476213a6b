"""NVIDIA GPUs through NVML: one persistent worker per GPU, read side by side each scrape.

A GPU whose NVML call hangs keeps only its own worker busy: this scrape and the next
ones report it `hw_gpu_up 0` (identity from discovery) until the call returns, while
the other GPUs report fully; no thread is started per scrape. Discovery runs on the
same workers under a deadline, so a GPU that hangs while being identified delays
neither start-up nor scrapes: it is identified at a later scrape, once it answers.
"""

from __future__ import annotations

import logging
import time
from functools import partial
from typing import ClassVar

from gpu_exporter.collectors.base import (
    Availability,
    Collector,
    CollectorUnavailable,
    Sink,
)
from gpu_exporter.readers import nvidia
from gpu_exporter.settings import Settings
from gpu_exporter.worker import Busy, Job, Worker

log = logging.getLogger("gpu_exporter.nvidia")

# Device reads must end this long before the scrape deadline, so that collect() itself
# returns in time for the exporter to keep what it wrote.
_RETURN_MARGIN_SECONDS = 0.15


class NvidiaCollector(Collector):
    name: ClassVar[str] = "nvidia"
    help: ClassVar[str] = "NVIDIA GPUs through NVML (libnvidia-ml.so.1)."

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._devices: dict[int, nvidia.NvmlDevice] = {}  # by NVML index
        self._pending: set[int] = set()  # listed by NVML, identity not read yet
        self._version: str | None = None
        # Kept across re-initialisations: a worker stuck in a hung call stays busy (and
        # its GPU down) instead of a second thread being started beside it.
        self._workers: dict[int, Worker] = {}
        self._xid: nvidia.XidListener | None = None
        self._initialised = False

    # -- life cycle ------------------------------------------------------------------
    def start(self) -> Availability:
        self._teardown()
        try:
            nvidia.init()
        except nvidia.NvmlUnavailable as exc:
            return Availability.unavailable(str(exc))
        self._initialised = True
        try:
            count = nvidia.device_count()
            self._version = nvidia.driver_version()
            if count == 0:
                self._teardown()
                return Availability.unavailable("no NVIDIA device")
            self._pending = set(range(count))
            jobs = self._submit_discovery()
            failures = self._finish_discovery(
                jobs, time.monotonic() + self.settings.scrape_timeout_seconds)
        except (nvidia.NvmlUnavailable, nvidia.NvmlGone) as exc:
            self._teardown()
            return Availability.unavailable(f"NVML stopped answering: {exc}")
        for _, message in failures:
            log.warning("%s", message)
        if not self._devices and not self._pending:
            self._teardown()
            return Availability.unavailable("no NVIDIA device could be identified")
        # XID events for the GPUs identified now; one identified later is listened to
        # after the next re-initialisation.
        self._xid = nvidia.XidListener(list(self._devices.values()))
        self._xid.start()
        migs = sum(len(d.migs) for d in self._devices.values())
        return Availability.enabled(
            f"{len(self._devices)} GPU(s)" + (f", {migs} MIG device(s)" if migs else "")
            + (f", {len(self._pending)} not identified yet" if self._pending else "")
            + (f", driver {self._version}" if self._version else "")
        )

    def _teardown(self) -> None:
        if self._xid is not None:
            self._xid.stop()
            self._xid = None
        self._devices = {}
        self._pending = set()
        if self._initialised:
            nvidia.shutdown()
            self._initialised = False

    def close(self) -> None:
        if self._xid is not None:
            self._xid.stop(wait=nvidia.XidListener.WAIT_MS / 1000.0 + 0.5)
        self._teardown()
        for worker in self._workers.values():
            worker.stop()
        self._workers.clear()

    def _worker(self, index: int) -> Worker:
        worker = self._workers.get(index)
        if worker is None:
            worker = self._workers[index] = Worker(f"nvidia-{index}")
        return worker

    # -- discovery -------------------------------------------------------------------
    def _submit_discovery(self) -> dict[int, Job[nvidia.NvmlDevice] | None]:
        jobs: dict[int, Job[nvidia.NvmlDevice] | None] = {}
        for index in sorted(self._pending):
            try:
                jobs[index] = self._worker(index).submit(
                    partial(nvidia.discover_one, index, self._version))
            except Busy:
                jobs[index] = None  # still stuck in an earlier call: try again later
        return jobs

    def _finish_discovery(
        self, jobs: dict[int, Job[nvidia.NvmlDevice] | None], deadline: float
    ) -> list[tuple[str, str]]:
        """Waits for discovery jobs until `deadline`; raises NvmlGone."""
        failures = []
        for index, job in jobs.items():
            if job is None or not job.wait(deadline - time.monotonic()):
                failures.append((f"gpu{index}:identity",
                                 f"NVIDIA device {index} did not answer its identity in time"))
                continue
            try:
                self._devices[index] = job.outcome()
                self._pending.discard(index)
            except nvidia.IdentityUnreadable as exc:
                failures.append((f"gpu{index}:identity", str(exc)))
        return failures

    # -- scrape ----------------------------------------------------------------------
    def collect(self, sink: Sink) -> None:
        reads: dict[int, Job[nvidia.DeviceResult] | None] = {}
        for index, dev in sorted(self._devices.items()):
            counts = self._xid.counts(dev.identity.hw_id) if self._xid is not None else None
            try:
                reads[index] = self._worker(index).submit(partial(nvidia.read, dev, counts))
            except Busy:
                reads[index] = None
        discovery = self._submit_discovery() if self._pending else {}
        deadline = sink.deadline - _RETURN_MARGIN_SECONDS
        try:
            for index, job in reads.items():
                self._report(sink, self._devices[index], job, deadline)
            for key, message in self._finish_discovery(discovery, deadline):
                sink.fail(key, message)
        except nvidia.NvmlGone as exc:
            self._teardown()
            raise CollectorUnavailable(
                f"NVML stopped answering (driver unloaded?): {exc}") from None

    def _report(
        self, sink: Sink, dev: nvidia.NvmlDevice, job: Job[nvidia.DeviceResult] | None,
        deadline: float,
    ) -> None:
        hw_id = dev.identity.hw_id
        readings = nvidia.down(dev)
        if job is None:
            sink.fail(f"{hw_id}:busy",
                      f"GPU {hw_id} is still stuck in an NVML call from an earlier scrape")
        elif not job.wait(deadline - time.monotonic()):
            sink.fail(f"{hw_id}:timeout",
                      f"GPU {hw_id} did not answer NVML within the scrape timeout")
        else:
            try:
                result = job.outcome()
            except nvidia.NvmlGone:
                raise
            except Exception as exc:  # one device's bug must not hide the others
                sink.fail(f"{hw_id}:{type(exc).__name__}", f"reading GPU {hw_id}: {exc}")
            else:
                readings = result.readings
                for key, message in result.failures:
                    sink.fail(key, message)
        for reading in readings:
            sink.gpu(reading)
