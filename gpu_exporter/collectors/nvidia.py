"""NVIDIA GPUs through NVML, read each scrape in lanes: persistent workers that read GPU
after GPU (see _LANES).

A GPU whose NVML call hangs keeps only its own lane's worker busy: the GPUs queued
behind it move to another lane once it has not answered for _STALL_SECONDS, and this
scrape and the next ones report it `hw_gpu_up 0` (identity from discovery) until the
call returns, while the other GPUs report fully; no thread is started per scrape beyond
one per stuck GPU, kept. Discovery runs on one worker per GPU under a deadline, so a GPU
that hangs while being identified delays neither start-up nor scrapes: it is
identified at a later scrape, once it answers.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
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
# GPUs are read in lanes, each on one worker, one GPU after another: a thread per GPU
# costs more in hand-offs and GIL contention (each hand-off some 70 µs of CPU on a small
# VM; four threads taking turns at the GIL between NVML calls triple the CPU) than fast
# NVML calls themselves. One lane while the last scrape's fastest read times the GPUs
# fits in _LANE_SECONDS; more (up to _LANES) when NVML is slow enough for waiting on it
# to dominate.
# A lane whose GPU has not answered for _STALL_SECONDS hands the GPUs after it to a new
# lane, so a hung or slow GPU holds up neither the others nor the scrape.
_LANES = 4
_LANE_SECONDS = 0.005
_STALL_SECONDS = 0.05
_Counts = Mapping[int, int] | None


@dataclass
class _Lane:
    items: list[tuple[int, nvidia.NvmlDevice, _Counts]]
    limit: int  # items from this position on are not started (handed to another lane)
    current: int = -1  # position of the GPU being read, or last read
    progress: float = field(default_factory=time.monotonic)  # when that read started
    fastest: float = math.inf  # seconds its fastest finished read took


@dataclass
class _Reads:
    """One scrape's reads, shared by the collecting thread and its lanes."""

    lock: threading.Lock
    inflight: set[int]  # the collector's: GPUs whose read has not returned, any scrape
    results: dict[int, tuple[nvidia.DeviceResult | None, BaseException | None]] = field(
        default_factory=dict)
    # One entry per lane that returned: the collecting thread wakes once per lane, not
    # once per GPU, and watches the lanes' progress meanwhile.
    finished: queue.SimpleQueue[_Lane] = field(default_factory=queue.SimpleQueue)


def _read_lane(reads: _Reads, lane: _Lane) -> None:
    try:
        for pos, (index, dev, counts) in enumerate(lane.items):
            with reads.lock:
                if pos >= lane.limit:
                    return
                lane.current = pos
                lane.progress = time.monotonic()
                reads.inflight.add(index)
            result: nvidia.DeviceResult | None = None
            error: BaseException | None = None
            try:
                result = nvidia.read(dev, counts)
            except BaseException as exc:  # handed to the collecting thread
                error = exc
            with reads.lock:
                reads.inflight.discard(index)
                reads.results[index] = (result, error)
                lane.fastest = min(lane.fastest, time.monotonic() - lane.progress)
    finally:
        reads.finished.put(lane)


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
        self._workers: dict[int, Worker] = {}  # discovery, by NVML index
        self._lane_workers: list[Worker] = []
        self._lock = threading.Lock()
        self._inflight: set[int] = set()  # kept too: a GPU stuck in a call stays down
        self._read_seconds = 0.0  # the fastest GPU read last scrape
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
        for worker in [*self._workers.values(), *self._lane_workers]:
            worker.stop()
        self._workers.clear()
        self._lane_workers.clear()

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
        discovery = self._submit_discovery() if self._pending else {}
        deadline = sink.deadline - _RETURN_MARGIN_SECONDS
        busy, results = self._read_all(deadline)
        try:
            for index, dev in sorted(self._devices.items()):
                self._report(sink, dev, index in busy, results.get(index))
            for key, message in self._finish_discovery(discovery, deadline):
                sink.fail(key, message)
        except nvidia.NvmlGone as exc:
            self._teardown()
            raise CollectorUnavailable(
                f"NVML stopped answering (driver unloaded?): {exc}") from None

    def _lane_worker(self) -> Worker:
        for worker in self._lane_workers:
            if not worker.busy:
                return worker
        # Every one is reading or stuck: at most one per stuck GPU, plus the lanes.
        worker = Worker(f"nvidia-lane-{len(self._lane_workers)}")
        self._lane_workers.append(worker)
        return worker

    def _read_all(self, deadline: float) -> tuple[
        set[int], dict[int, tuple[nvidia.DeviceResult | None, BaseException | None]]
    ]:
        """Reads every GPU whose last read returned, in lanes, until `deadline`: the GPUs
        still stuck in an earlier call, and what was read."""
        reads = _Reads(self._lock, self._inflight)
        with self._lock:
            busy = self._inflight & self._devices.keys()
        items: list[tuple[int, nvidia.NvmlDevice, _Counts]] = [
            (index, dev,
             self._xid.counts(dev.identity.key) if self._xid is not None else None)
            for index, dev in sorted(self._devices.items()) if index not in busy
        ]
        lanes: list[_Lane] = []
        running: set[int] = set()  # ids of the lanes not returned yet

        def launch(lane_items: list[tuple[int, nvidia.NvmlDevice, _Counts]]) -> None:
            lane = _Lane(lane_items, len(lane_items))
            lanes.append(lane)
            running.add(id(lane))
            self._lane_worker().submit(partial(_read_lane, reads, lane))

        lanes_wanted = max(1, min(_LANES, len(items),
                                  math.ceil(len(items) * self._read_seconds / _LANE_SECONDS)))
        size = -(-len(items) // lanes_wanted) if items else 0
        for start in range(0, len(items), size or 1):
            launch(items[start:start + size])
        while running:
            now = time.monotonic()
            if now >= deadline:
                break
            wake = deadline
            for lane in list(lanes):
                with self._lock:
                    cut = max(lane.current + 1, 1)
                    movable = id(lane) in running and lane.limit > cut
                    if movable and now - lane.progress >= _STALL_SECONDS:
                        moved = lane.items[cut:lane.limit]
                        lane.limit = cut
                        movable = False
                    else:
                        moved = []
                if moved:
                    launch(moved)
                    wake = min(wake, lanes[-1].progress + _STALL_SECONDS)
                elif movable:
                    wake = min(wake, lane.progress + _STALL_SECONDS)
            try:
                running.discard(id(reads.finished.get(
                    timeout=max(0.0, wake - time.monotonic()))))
            except queue.Empty:
                continue
        with self._lock:
            for lane in lanes:  # what has not started by now never will
                lane.limit = min(lane.limit, lane.current + 1)
            if reads.results:
                # The fastest read, not the mean: reads in parallel lanes also wait for
                # the GIL, and would ask for ever more lanes.
                self._read_seconds = min(lane.fastest for lane in lanes)
            return busy, dict(reads.results)

    def _report(
        self, sink: Sink, dev: nvidia.NvmlDevice, busy: bool,
        read: tuple[nvidia.DeviceResult | None, BaseException | None] | None,
    ) -> None:
        hw_id = dev.identity.hw_id
        readings = nvidia.down(dev)
        if busy:
            sink.fail(f"{hw_id}:busy",
                      f"GPU {hw_id} is still stuck in an NVML call from an earlier scrape")
        elif read is None:
            sink.fail(f"{hw_id}:timeout",
                      f"GPU {hw_id} did not answer NVML within the scrape timeout")
        else:
            result, error = read
            if isinstance(error, nvidia.NvmlGone):
                raise error
            if isinstance(error, Exception):  # one device's bug must not hide the others
                sink.fail(f"{hw_id}:{type(error).__name__}", f"reading GPU {hw_id}: {error}")
            elif error is not None:
                raise error
            elif result is not None:
                readings = result.readings
                for key, message in result.failures:
                    sink.fail(key, message)
        for reading in readings:
            sink.gpu(reading)
