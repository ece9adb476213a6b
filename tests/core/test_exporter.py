"""The orchestrator: isolation of failures, deadlines, retries, label joins.

The collectors here are test data sources for the orchestrator only; the real readers
are tested against the fake NVML library and real sysfs captures in their own areas.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import ClassVar

from prometheus_client.exposition import generate_latest

from gpu_exporter.collectors.base import Availability, Collector, Feature, Sink
from gpu_exporter.commands.cli import doctor_report
from gpu_exporter.model import catalogue as c
from gpu_exporter.model.records import GpuIdentity, GpuReading
from gpu_exporter.model.settings import Settings
from gpu_exporter.scrape.exporter import GpuExporterCollector, make_registry
from tests.helpers import Series, eventually, find, parse, promtool_check_metrics, value


def _gpu(hw_id: str, vendor: str, key: tuple[int | str, ...], pci: str,
         parent: str | None = None, **fields: object) -> GpuReading:
    ident = GpuIdentity(hw_id=hw_id, name=f"{vendor} card", vendor=vendor,  # type: ignore[arg-type]
                        pci_address=pci, order_key=key, parent_hw_id=parent,
                        mig_profile="1g.10gb" if parent else None)
    return GpuReading(identity=ident, up=True, **fields)  # type: ignore[arg-type]


class Enabled(Collector):
    """A test data source that is always available."""

    def start(self) -> Availability:
        return Availability.enabled()


class Gpus(Enabled):
    name = "gpus"
    help = "test devices"
    readings: ClassVar[list[GpuReading]] = []

    def collect(self, sink: Sink) -> None:
        for r in self.readings:
            sink.gpu(r)
        c.PROCESS_GPU_MEMORY_USAGE.emit(sink, 1024, {"process_pid": "42"},
                                        device="0000:03:00.0")
        c.PROCESS_GPU_MEMORY_USAGE.emit(sink, None, {"process_pid": "43"}, device="AMD-1")
        c.GPU_MEMORY_COPIES.emit(
            sink, [(1024.0, 2), (4096.0, 3), (float("inf"), 3)], 5000.0,
            {"cuda_memcpy_kind": "HostToDevice", "process_executable_name": "train"})


class Broken(Enabled):
    name = "broken"
    help = "raises"

    def collect(self, sink: Sink) -> None:
        raise RuntimeError("boom")


class Hangs(Enabled):
    name = "hangs"
    help = "never returns in time"
    release = threading.Event()

    def collect(self, sink: Sink) -> None:
        self.release.wait(30)


class Later(Collector):
    name = "later"
    help = "unavailable at first"
    ready = False

    def start(self) -> Availability:
        return Availability.enabled() if Later.ready else Availability.unavailable("not yet")

    def collect(self, sink: Sink) -> None:
        c.SYSTEM_MEMORY_UTILIZATION.emit(sink, 0.5, {})


def _exporter(*classes: type[Collector], timeout: float = 5.0) -> GpuExporterCollector:
    settings = Settings(
        scrape_timeout_seconds=timeout,
        enabled_collectors=frozenset(cls.name for cls in classes),
        resource_labels={"host_name": "h"},
        retry_interval_seconds=0.01,
    )
    exp = GpuExporterCollector(settings, classes)
    exp.start()
    return exp


def _scrape(exp: GpuExporterCollector) -> str:
    return generate_latest(make_registry(exp)).decode()


def test_index_order_labels_joins_and_absent_values() -> None:
    Gpus.readings = [
        _gpu("intel-b", "intel", ("0000:09:00.0",), "0000:09:00.0"),
        _gpu("AMD-1", "amd", ("0000:03:00.0",), "0000:03:00.0", memory_usage_bytes=1,
             memory_limit_bytes=4),
        _gpu("GPU-b", "nvidia", (1,), "0000:3b:00.0"),
        _gpu("GPU-a", "nvidia", (0,), "0000:1b:00.0", power_draw_watts=None),
        _gpu("MIG-x", "nvidia", (0, 1), "0000:1b:00.0", parent="GPU-a"),
    ]
    exp = _exporter(Gpus)
    text = _scrape(exp)
    exp.close()
    series = parse(text)
    index = {s.labels["hw_id"]: s.labels["gpu_index"] for s in find(series, "hw_gpu_up")}
    assert index == {"GPU-a": "0", "GPU-b": "1", "AMD-1": "2", "intel-b": "3", "MIG-x": "0"}
    mig = find(series, "hw_gpu_up", hw_id="MIG-x")[0]
    assert mig.labels["hw_parent"] == "GPU-a" and mig.labels["gpu_mig_profile"] == "1g.10gb"
    assert value(series, "hw_gpu_memory_utilization_ratio", hw_id="AMD-1") == 0.25
    assert not find(series, "hw_gpu_power_draw_watts")
    proc = find(series, "process_gpu_memory_usage_bytes")
    assert len(proc) == 1 and proc[0].labels["hw_id"] == "AMD-1"
    assert proc[0].labels["gpu_index"] == "2" and proc[0].labels["host_name"] == "h"
    assert value(series, "gpu_memory_copies_bytes_bucket", le="4096.0") == 3
    assert value(series, "gpu_memory_copies_bytes_count") == 3
    assert value(series, "gpu_memory_copies_bytes_sum") == 5000
    promtool_check_metrics(text)


def test_one_failing_collector_does_not_fail_the_others() -> None:
    Gpus.readings = [_gpu("GPU-a", "nvidia", (0,), "0000:1b:00.0")]
    exp = _exporter(Gpus, Broken)
    series = parse(_scrape(exp))
    exp.close()
    assert value(series, "gpu_exporter_collector_success", collector="broken") == 0
    assert value(series, "gpu_exporter_collector_success", collector="gpus") == 1
    assert value(series, "hw_gpu_up", hw_id="GPU-a") == 1


def test_hung_collector_answers_within_timeout_without_piling_threads() -> None:
    Gpus.readings = [_gpu("GPU-a", "nvidia", (0,), "0000:1b:00.0")]
    Hangs.release.clear()
    exp = _exporter(Gpus, Hangs, timeout=1.0)
    try:
        counts = []
        for _ in range(6):
            started = time.monotonic()
            series = parse(_scrape(exp))
            assert time.monotonic() - started < 1.5
            assert value(series, "gpu_exporter_collector_success", collector="hangs") == 0
            assert value(series, "hw_gpu_up", hw_id="GPU-a") == 1
            counts.append(threading.active_count())
        assert max(counts) - min(counts) <= 2, counts
    finally:
        Hangs.release.set()
        exp.close()


def test_unavailable_collector_becomes_available_without_restart() -> None:
    Later.ready = False
    exp = _exporter(Later)
    series = parse(_scrape(exp))
    assert value(series, "gpu_exporter_feature_status", feature="later", state="unavailable") == 1
    assert not find(series, "system_memory_utilization_ratio")
    Later.ready = True

    def enabled() -> list[Series]:  # once the retry interval (10 ms) has passed
        s = parse(_scrape(exp))
        assert value(s, "gpu_exporter_feature_status", feature="later", state="enabled") == 1
        return s

    series = eventually(enabled, 10)
    exp.close()
    assert value(series, "system_memory_utilization_ratio") == 0.5


def test_scrapes_arriving_during_a_collection_share_it() -> None:
    calls: list[float] = []
    entered, release = threading.Event(), threading.Event()

    class Slow(Enabled):
        name = "slow"
        help = "slow"

        def collect(self, sink: Sink) -> None:
            calls.append(time.monotonic())
            entered.set()
            release.wait(30)
            c.SYSTEM_MEMORY_UTILIZATION.emit(sink, len(calls), {})

    exp = _exporter(Slow)
    results: list[str] = []
    first = threading.Thread(target=lambda: results.append(_scrape(exp)))
    first.start()
    assert entered.wait(10)
    # Seven more scrapes arrive while the first one is still collecting.
    others = [threading.Thread(target=lambda: results.append(_scrape(exp))) for _ in range(7)]
    for t in others:
        t.start()
    # all seven are waiting for the first collection (the exporter counts its waiters)
    eventually(lambda: exp._waiting == 7, 10, "seven scrapes waiting")
    release.set()
    for t in [first, *others]:
        t.join(30)
    after = parse(_scrape(exp))  # arrives after it: a collection of its own
    exp.close()
    assert len(results) == 8 and len(set(results)) == 1, "every scrape got the same result"
    assert value(parse(results[0]), "system_memory_utilization_ratio") == 1
    assert len(calls) == 2
    assert value(after, "system_memory_utilization_ratio") == 2


def test_no_cyclic_garbage_collection_until_the_scrape_is_rendered() -> None:
    during: list[bool] = []

    class Watches(Enabled):
        name = "watches"
        help = "notes whether the garbage collector may run"

        def collect(self, sink: Sink) -> None:
            during.append(gc.isenabled())
            c.SYSTEM_MEMORY_UTILIZATION.emit(sink, 0.5, {})

    exp = _exporter(Watches)
    try:
        assert gc.isenabled()
        first = exp.collect()
        next(first)
        assert not gc.isenabled(), "off while the families are handed out"
        list(first)
        assert gc.isenabled(), "back on once they are rendered"
        dropped = exp.collect()
        next(dropped)
        del dropped  # a response abandoned half-way ends the pause too
        assert gc.isenabled()
        never_read = exp.collect()
        assert not gc.isenabled()
        del never_read  # and one abandoned before its first family
        assert gc.isenabled()
        assert value(parse(_scrape(exp)), "system_memory_utilization_ratio") == 0.5
        assert during == [False, False, False, False] and gc.isenabled()
        gc.disable()  # turned off by someone else: left off
        try:
            _scrape(exp)
            assert not gc.isenabled()
        finally:
            gc.enable()
    finally:
        exp.close()


def test_a_scrapes_series_do_not_outlive_it() -> None:
    """Once a scrape is rendered nothing keeps its Sinks (and every series in them)
    alive until the next scrape: the young collection at the end of each scrape would
    walk them all (docs/performance.md, issue #26 second pass)."""

    class Emits(Enabled):
        name = "outlives"  # this test's sinks only (others may still run elsewhere)
        help = "emits one series"

        def collect(self, sink: Sink) -> None:
            c.SYSTEM_MEMORY_UTILIZATION.emit(sink, 0.5, {})

    exp = _exporter(Emits)
    try:
        _scrape(exp)
        assert value(parse(_scrape(exp)), "system_memory_utilization_ratio") == 0.5
        gc.collect()  # only what is still referenced remains
        kept = [o for o in gc.get_objects()
                if isinstance(o, Sink) and o.collector == "outlives"]
        assert kept == [], f"{len(kept)} sinks of an ended scrape still referenced"
    finally:
        exp.close()


class Partial(Enabled):
    """A collector with a host-wide feature and one whose state differs per device."""

    name = "partial"
    help = "features"

    def features(self) -> list[Feature]:
        return [
            Feature("socket", Availability.unavailable("no socket at /x", "mount /x")),
            Feature("events", Availability.enabled(), hw_id="GPU-a"),
            Feature("events", Availability.unavailable("driver lacks the event API",
                                                       "upgrade the driver"), hw_id="GPU-b"),
            Feature("events", Availability.disabled("consumer card"), hw_id="GPU-c"),
        ]

    def collect(self, sink: Sink) -> None:
        c.SYSTEM_MEMORY_UTILIZATION.emit(sink, 0.5, {})


def test_feature_states_per_device_carry_hw_id_and_do_not_fail_the_collector() -> None:
    exp = _exporter(Partial)
    series = parse(_scrape(exp))
    exp.close()
    assert value(series, "gpu_exporter_collector_success", collector="partial") == 1
    assert value(series, "gpu_exporter_feature_status", feature="partial.socket",
                 state="unavailable") == 1
    for hw_id, state in (("GPU-a", "enabled"), ("GPU-b", "unavailable"),
                         ("GPU-c", "disabled")):
        rows = find(series, "gpu_exporter_feature_status", feature="partial.events",
                    hw_id=hw_id)
        assert {r.labels["state"]: r.value for r in rows} == {
            s: (1.0 if s == state else 0.0) for s in ("enabled", "unavailable", "disabled")}
    assert not find(series, "gpu_exporter_feature_status", feature="partial.socket",
                    hw_id="GPU-a")


def test_an_unavailable_collector_claims_no_success() -> None:
    Later.ready = False
    exp = _exporter(Later, Partial)
    series = parse(_scrape(exp))
    exp.close()
    assert value(series, "gpu_exporter_feature_status", feature="later", state="unavailable") == 1
    assert not find(series, "gpu_exporter_collector_success", collector="later")
    assert value(series, "gpu_exporter_collector_success", collector="partial") == 1


def test_doctor_report_gives_reason_and_fix_and_groups_devices() -> None:
    Later.ready = False
    exp = _exporter(Later, Partial)
    report = doctor_report(exp.availability())
    exp.close()
    lines = report.splitlines()
    assert lines[0].split() == ["later", "unavailable", "not", "yet"]
    socket = lines.index(next(line for line in lines if "partial.socket" in line))
    assert "no socket at /x" in lines[socket] and lines[socket + 1].strip() == "fix: mount /x"
    events = [line for line in lines if "partial.events" in line]
    assert len(events) == 3, report
    assert "GPU-b: driver lacks the event API" in events[1]
    assert lines[lines.index(events[1]) + 1].strip() == "fix: upgrade the driver"
    assert "GPU-c: consumer card" in events[2]


def test_a_gpu_without_identity_is_keyed_by_its_pci_address_and_has_no_hw_id() -> None:
    Gpus.readings = [
        _gpu("GPU-0", "nvidia", (0,), "0000:01:00.0"),
        GpuReading(GpuIdentity(hw_id=None, name="", vendor="nvidia",
                               pci_address="0000:02:00.0", order_key=(1,)), up=False),
    ]
    exp = _exporter(Gpus)
    series = parse(_scrape(exp))
    exp.close()
    up = {s.labels["gpu_pci_address"]: s for s in find(series, "hw_gpu_up")}
    assert up["0000:02:00.0"].value == 0
    assert "hw_id" not in up["0000:02:00.0"].labels and "hw_name" not in up["0000:02:00.0"].labels
    assert up["0000:02:00.0"].labels["gpu_index"] == "1"
    assert up["0000:01:00.0"].labels["hw_id"] == "GPU-0"


class Unreadable(Collector):
    """A source whose start meets a file its user may not read, until it may."""

    name = "unreadable"
    help = "a folder of mode 000"
    readable = False

    def start(self) -> Availability:
        if not Unreadable.readable:
            raise PermissionError(13, "Permission denied", "/sys/class/drm/card0/device")
        return Availability.enabled()

    def collect(self, sink: Sink) -> None:
        c.SYSTEM_MEMORY_UTILIZATION.emit(sink, 0.5, {})


def test_a_permission_error_at_start_is_a_feature_state_retried_not_an_exit() -> None:
    Unreadable.readable = False
    Gpus.readings = [_gpu("GPU-a", "nvidia", (0,), "0000:1b:00.0")]
    exp = _exporter(Gpus, Unreadable)  # start() did not raise
    try:
        series = parse(_scrape(exp))
        assert value(series, "gpu_exporter_feature_status", feature="unreadable",
                     state="unavailable") == 1
        assert value(series, "hw_gpu_up", hw_id="GPU-a") == 1
        report = doctor_report(exp.availability())
        assert ("cannot read /sys/class/drm/card0/device: Permission denied" in report
                and "fix: give the exporter's user read access" in report), report
        Unreadable.readable = True  # tried again every retry interval (10 ms here)

        def restarted() -> list[Series]:
            s = parse(_scrape(exp))
            return s if find(s, "system_memory_utilization_ratio") else []

        series = eventually(restarted, 10, "started again", interval=0.01)
        assert value(series, "system_memory_utilization_ratio") == 0.5
    finally:
        exp.close()


class _Threads:
    """Which thread ran each test collector's collect(), and when."""

    ran: ClassVar[dict[str, str]] = {}


class Quick(Enabled):
    """Cannot hang (guarded() False): reads the kernel's own tables."""

    name = "quick"
    help = "runs on the scrape's thread"

    def guarded(self) -> bool:
        return False

    def collect(self, sink: Sink) -> None:
        _Threads.ran[self.name] = threading.current_thread().name
        c.SYSTEM_MEMORY_UTILIZATION.emit(sink, 0.5, {})


class Careful(Quick):
    """May hang (the default): on its own worker."""

    name = "careful"
    help = "runs on its worker"

    def guarded(self) -> bool:
        return True


class WaitsA(Quick):
    """Cannot hang, but waits for devices until the deadline (a GPU hung in a lane).
    With `meet` set, it waits for the other such collector to be waiting too: run one
    after the other, the first waits until the deadline and fails."""

    name = "waits_a"
    help = "waits for a hung device"
    waits_for_devices = True
    meet: ClassVar[threading.Barrier | None] = None

    def collect(self, sink: Sink) -> None:
        super().collect(sink)
        if self.meet is not None:
            self.meet.wait(sink.time_left())  # BrokenBarrierError: it waited alone


class WaitsB(WaitsA):
    name = "waits_b"


def test_collectors_that_cannot_hang_run_on_the_scrapes_own_thread() -> None:
    WaitsA.meet = None
    exp = _exporter(Quick, Careful, WaitsA, WaitsB)
    try:
        _Threads.ran.clear()
        scraper = threading.current_thread().name
        series = parse(_scrape(exp))
        for name in ("quick", "careful", "waits_a", "waits_b"):
            assert value(series, "gpu_exporter_collector_success", collector=name) == 1
        # The hand-offs a 1 Hz scrape pays for are spared where no hang can happen...
        assert _Threads.ran["quick"] == scraper
        assert _Threads.ran["careful"] == "worker-careful"
        # ...and of the collectors that wait for devices, this thread runs one only.
        assert _Threads.ran["waits_b"] == scraper
        assert _Threads.ran["waits_a"] == "worker-waits_a"
    finally:
        exp.close()


def test_two_collectors_waiting_for_hung_devices_do_not_add_up() -> None:
    # Each waits for devices until the other waits too (a GPU hung in a lane call until
    # the deadline): run one after the other, the first would wait alone until the
    # deadline and fail; side by side, both return.
    WaitsA.meet = threading.Barrier(2)
    exp = _exporter(Quick, WaitsA, WaitsB, timeout=5.0)
    try:
        series = parse(_scrape(exp))
        assert value(series, "gpu_exporter_collector_success", collector="waits_a") == 1
        assert value(series, "gpu_exporter_collector_success", collector="waits_b") == 1
    finally:
        WaitsA.meet = None
        exp.close()


class SaysGuardedFails(Quick):
    name = "guard_fails"
    help = "guarded() raises"

    def guarded(self) -> bool:
        raise RuntimeError("cannot tell")


def test_a_collector_that_cannot_tell_whether_it_may_hang_runs_on_its_worker() -> None:
    exp = _exporter(SaysGuardedFails)
    try:
        series = parse(_scrape(exp))
        assert value(series, "gpu_exporter_collector_success", collector="guard_fails") == 1
        assert _Threads.ran["guard_fails"] == "worker-guard_fails"
    finally:
        exp.close()
