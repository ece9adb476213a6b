"""A single reusable thread that runs one job at a time with a deadline.

A call that hangs (a stuck NVML call, a blocking sysfs file) keeps its worker busy; the
caller stops waiting at its deadline and new jobs are refused until the stuck one
returns, so repeated scrapes never pile up threads.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Busy(Exception):
    """The worker is still running an earlier job."""


class Job(Generic[T]):
    def __init__(self, fn: Callable[[], T]) -> None:
        self.fn: Callable[[], T] | None = fn
        self.done = threading.Event()
        self.result: T | None = None
        self.error: BaseException | None = None

    def wait(self, timeout: float) -> bool:
        """True when the job finished within `timeout` seconds."""
        return self.done.wait(max(0.0, timeout))

    def outcome(self) -> T:
        """The finished job's result, or what it raised."""
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


def run_here(fn: Callable[[], T]) -> Job[T]:
    """fn run on the calling thread, as a finished Job: what a worker would have handed
    back, without the hand-off (for work that cannot hang)."""
    job: Job[T] = Job(fn)
    job.fn = None
    try:
        job.result = fn()
    except BaseException as exc:  # handed to the caller, as a worker's job is
        job.error = exc
    finally:
        job.done.set()
    return job


class Worker:
    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[Job[object] | None] = queue.SimpleQueue()
        self._current: Job[object] | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"worker-{name}", daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._current is not None and not self._current.done.is_set()

    def submit(self, fn: Callable[[], T]) -> Job[T]:
        """Start fn on the worker thread and return at once (raise Busy while an earlier
        job runs), so that several workers can run side by side under one deadline."""
        with self._lock:
            if self._current is not None and not self._current.done.is_set():
                raise Busy(self.name)
            job: Job[T] = Job(fn)
            self._current = job  # type: ignore[assignment]
        self._jobs.put(job)  # type: ignore[arg-type]
        return job

    def stop(self) -> None:
        self._jobs.put(None)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, job.fn = job.fn, None
            try:
                job.result = fn()  # type: ignore[misc]
            except BaseException as exc:  # handed to the caller
                job.error = exc
            finally:
                # The worker keeps its last job (to refuse new ones while it runs), not
                # what the job closed over: a scrape's sinks, every series it emitted,
                # would otherwise live until the next scrape and be walked by the
                # garbage collector at the end of this one (docs/performance.md).
                del fn
                job.done.set()
