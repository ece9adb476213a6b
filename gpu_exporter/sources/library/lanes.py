"""Per-device library work in lanes: persistent workers that run one device's job after
another, so that a device whose call hangs (or that is lost) costs only itself. Every
per-GPU call of the NVML stack runs this way (device values, process lists, process
utilization, field values), and every per-device HLML read of the gaudi collector.

A GPU whose job has not returned for _STALL_SECONDS hands the GPUs queued behind it to
a new lane; the caller stops waiting at its deadline. Until the stuck job returns, the
GPU is `busy`: it is not given another job (no thread piles up scrape after scrape) and
its owner reports it stuck. At most one worker per stuck GPU is added to the lanes.

GPUs are read in few lanes, not a thread each: a thread per GPU costs more in hand-offs
and GIL contention (each hand-off some 70 µs of CPU on a small VM; four threads taking
turns at the GIL between NVML calls triple the CPU) than fast NVML calls themselves.
One lane while the last run's fastest job times the GPUs fits in _LANE_SECONDS; more
(up to _LANES) when NVML is slow enough for waiting on it to dominate.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Generic, TypeVar

from gpu_exporter.model.worker import Worker

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")

_LANES = 4
_LANE_SECONDS = 0.005
_STALL_SECONDS = 0.05

Outcome = tuple[R | None, BaseException | None]


@dataclass
class _Lane(Generic[K, R]):
    jobs: list[tuple[K, Callable[[], R]]]
    limit: int  # jobs from this position on are not started (handed to another lane)
    current: int = -1  # position of the job running, or last run
    progress: float = field(default_factory=time.monotonic)  # when that job started
    fastest: float = math.inf  # seconds its fastest finished job took


class Run(Generic[K, R]):
    """One round of jobs: started at once, supervised and collected by `finish`."""

    def __init__(self, lanes: Lanes[K, R], busy: set[K]) -> None:
        self._owner = lanes
        self.busy = busy  # stuck in a job of an earlier round: not started this time
        self.results: dict[K, Outcome[R]] = {}  # a key absent: did not return in time
        self._lanes: list[_Lane[K, R]] = []
        self._running: set[int] = set()  # ids of the lanes not returned yet
        # One entry per lane that returned: the finishing thread wakes once per lane,
        # not once per GPU, and watches the lanes' progress meanwhile.
        self._finished: queue.SimpleQueue[_Lane[K, R]] = queue.SimpleQueue()

    def launch(self, jobs: list[tuple[K, Callable[[], R]]]) -> None:
        lane: _Lane[K, R] = _Lane(jobs, len(jobs))
        self._lanes.append(lane)
        self._running.add(id(lane))
        self._owner._worker().submit(partial(self._run_lane, lane))

    def _run_lane(self, lane: _Lane[K, R]) -> None:
        lock, inflight = self._owner._lock, self._owner._inflight
        try:
            for pos, (key, job) in enumerate(lane.jobs):
                with lock:
                    if pos >= lane.limit:
                        return
                    lane.current = pos
                    lane.progress = time.monotonic()
                    inflight.add(key)
                result: R | None = None
                error: BaseException | None = None
                try:
                    result = job()
                except BaseException as exc:  # handed to the finishing thread
                    error = exc
                with lock:
                    inflight.discard(key)
                    self.results[key] = (result, error)
                    lane.fastest = min(lane.fastest, time.monotonic() - lane.progress)
        finally:
            self._finished.put(lane)

    def finish(self, deadline: float) -> dict[K, Outcome[R]]:
        """Hands the GPUs behind a stuck one to new lanes until every lane returned or
        `deadline` passed; what returned by then, by key."""
        lock = self._owner._lock
        while self._running:
            now = time.monotonic()
            if now >= deadline:
                break
            wake = deadline
            for lane in list(self._lanes):
                with lock:
                    cut = max(lane.current + 1, 1)
                    movable = id(lane) in self._running and lane.limit > cut
                    if movable and now - lane.progress >= _STALL_SECONDS:
                        moved = lane.jobs[cut:lane.limit]
                        lane.limit = cut
                        movable = False
                    else:
                        moved = []
                if moved:
                    self.launch(moved)
                    wake = min(wake, self._lanes[-1].progress + _STALL_SECONDS)
                elif movable:
                    wake = min(wake, lane.progress + _STALL_SECONDS)
            try:
                self._running.discard(id(self._finished.get(
                    timeout=max(0.0, wake - time.monotonic()))))
            except queue.Empty:
                continue
        with lock:
            for lane in self._lanes:  # what has not started by now never will
                lane.limit = min(lane.limit, lane.current + 1)
            if self.results:
                # The fastest job, not the mean: jobs in parallel lanes also wait for
                # the GIL, and would ask for ever more lanes.
                self._owner._job_seconds = min(lane.fastest for lane in self._lanes)
            return dict(self.results)


class Lanes(Generic[K, R]):
    """The lanes of one kind of per-GPU work (one per collector; the NVML stack has its
    own for the process lists every collector shares). Workers are kept for
    the life of the process: a worker stuck in a hung call stays busy, and its GPU stays
    `busy`, across NVML sessions, instead of a second thread being started beside it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._inflight: set[K] = set()
        self._workers: list[Worker] = []
        self._job_seconds = 0.0  # the fastest job of the last round

    def start(self, jobs: Sequence[tuple[K, Callable[[], R]]]) -> Run[K, R]:
        """Starts a job per GPU (key) except on GPUs still stuck in an earlier job."""
        with self._lock:
            busy = {key for key, _ in jobs if key in self._inflight}
        run: Run[K, R] = Run(self, busy)
        todo = [(key, job) for key, job in jobs if key not in busy]
        wanted = max(1, min(_LANES, len(todo),
                            math.ceil(len(todo) * self._job_seconds / _LANE_SECONDS)))
        size = -(-len(todo) // wanted) if todo else 0
        for first in range(0, len(todo), size or 1):
            run.launch(todo[first:first + size])
        return run

    def _worker(self) -> Worker:
        for worker in self._workers:
            if not worker.busy:
                return worker
        # Every one is running or stuck: at most one per stuck GPU, plus the lanes.
        worker = Worker(f"{self.name}-lane-{len(self._workers)}")
        self._workers.append(worker)
        return worker

    def close(self) -> None:
        for worker in self._workers:
            worker.stop()
        self._workers.clear()
