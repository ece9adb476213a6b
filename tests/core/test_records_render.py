"""scrape/records_render.py writes a scrape's own records (`ScrapeRecords`) byte for byte
as prometheus_client writes `build_families` of the same records (text 0.0.4/1.0.0 via
`generate_latest`, OpenMetrics 1.0.0 via its `generate_latest`, every name escaping):
random families of the catalogue with random own labels, values (0.0, -0.0, NaN, ±Inf,
ints), devices some of which no collector reported, and device labels that change from
one render to the next, rendered again and again by one renderer (its cached lines).
Also: the label check fails the render as it fails the library's path, and the real
exporter's scrape renders as the library renders its families."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.registry import Collector as PromCollector
from prometheus_client.registry import CollectorRegistry

from gpu_exporter.collectors.base import Availability, Collector, Sink
from gpu_exporter.model import catalogue as c
from gpu_exporter.model import metric_types
from gpu_exporter.model.metric_types import Emitted, Family, Kind, LabelSchemaError
from gpu_exporter.model.records import GpuIdentity, GpuReading
from gpu_exporter.model.settings import Settings
from gpu_exporter.scrape import render
from gpu_exporter.scrape.exporter import GpuExporterCollector, make_registry
from gpu_exporter.scrape.records import ScrapeRecords
from gpu_exporter.scrape.records_render import RecordSource
from gpu_exporter.scrape.render import ESCAPINGS, TextRenderer

FAMILIES = [*c.SCRAPE_FAMILIES, *c.HTTP_FAMILIES]
HISTOGRAMS = [f for f in FAMILIES if f.kind is Kind.HISTOGRAM]
DEVICES = ["GPU-0", "GPU-1", "0000:3b:00.0", "gone"]
# Label names shared by the resource, the devices and the series (which wins is tested),
# some not legacy names (the escapings differ on them).
NAMES = ["host_name", "hw_id", "gpu_index", "pod", "reason", "a.b", "ü", "le_x"]
TEXT = st.text(st.sampled_from('ab_"\\\n.é0'), max_size=4)
VALUES = st.one_of(st.sampled_from([0.0, -0.0, math.nan, math.inf, -math.inf, 0, 1, 1.0,
                                    2.5, 1e21, 123456789.0, -3.0]),
                   st.floats(allow_nan=True, allow_infinity=True),
                   st.integers(-(2**53), 2**53))
LABELS = st.dictionaries(st.sampled_from(NAMES), TEXT, max_size=3)
DEVICE = st.one_of(st.none(), st.sampled_from(DEVICES))


class Enabled(Collector):
    def start(self) -> Availability:
        return Availability.enabled()


class Records(PromCollector):
    """A collector that hands its records to the renderer (its `collect` is unused)."""

    def __init__(self, records: ScrapeRecords) -> None:
        self.records = records

    def collect(self) -> Iterator[Metric]:
        raise AssertionError("the renderer takes the records")

    def collect_records(self) -> ScrapeRecords:
        return self.records


class Families(PromCollector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def one(collector: PromCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


@st.composite
def emitted(draw: st.DrawFn) -> Emitted:
    out = Emitted()
    for fam in draw(st.lists(st.sampled_from(FAMILIES), max_size=6, unique=True)):
        for _ in range(draw(st.integers(0, 4))):
            out.scalars[fam].append((draw(LABELS), draw(VALUES), draw(DEVICE)))
    for fam in draw(st.lists(st.sampled_from(HISTOGRAMS), max_size=2, unique=True)):
        for _ in range(draw(st.integers(0, 3))):
            bounds = sorted(draw(st.lists(st.floats(-10, 1e9), max_size=4, unique=True)))
            counts = sorted(draw(st.lists(st.integers(0, 1000), min_size=len(bounds) + 1,
                                          max_size=len(bounds) + 1)))
            buckets = [*zip([*bounds, math.inf], counts, strict=True)]
            out.histograms[fam].append((draw(LABELS), buckets, draw(VALUES), draw(DEVICE)))
    return out


DEVICE_LABELS = st.dictionaries(st.sampled_from(DEVICES[:3]), LABELS, max_size=3)
RESOURCE = st.dictionaries(st.sampled_from(["host_name", "team", "a.b"]), TEXT, max_size=2)


def assert_renders_as_library(renderer: TextRenderer, records: ScrapeRecords) -> None:
    ours, oracle = one(Records(records)), one(Families(records.families()))
    for escaping in sorted(ESCAPINGS):
        assert renderer.render(ours, escaping) == generate_latest(oracle, escaping)
        assert (renderer.render_openmetrics(ours, escaping)
                == openmetrics_latest(oracle, escaping))  # type: ignore[no-untyped-call]


@pytest.fixture
def unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random labels do not fit the families' schemas: the check is tested below."""
    monkeypatch.setattr(metric_types, "CHECK_LABELS", False)


@pytest.mark.usefixtures("unchecked")
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(st.lists(emitted(), min_size=1, max_size=3), DEVICE_LABELS, DEVICE_LABELS,
       RESOURCE, st.data())
def test_records_render_as_prometheus_client_writes_their_families(
        sets: list[Emitted], devices: dict[str, dict[str, str]],
        changed: dict[str, dict[str, str]], resource: dict[str, str],
        data: st.DataObject) -> None:
    renderer = TextRenderer()
    first = ScrapeRecords(sets, devices, resource)
    assert_renders_as_library(renderer, first)
    assert_renders_as_library(renderer, first)  # every line from the previous render
    # The next scrape: the same series, their devices' labels changed (pod labels,
    # gpu_index), some devices gone or new, some values changed.
    later = [Emitted() for _ in sets]
    for before, after in zip(sets, later, strict=True):
        for fam, series in before.scalars.items():
            after.scalars[fam] = [(own, data.draw(VALUES) if data.draw(st.booleans())
                                   else value, device) for own, value, device in series]
        after.histograms.update(before.histograms)
    assert_renders_as_library(renderer, ScrapeRecords(later, changed, resource))
    assert_renders_as_library(renderer, first)


@pytest.mark.usefixtures("unchecked")
def test_a_value_that_changes_between_equal_numbers_is_written_again() -> None:
    """0.0 and -0.0 are equal and written apart; 1 and 1.0 written alike; NaN never equal
    to itself: one series' value through consecutive renders."""
    renderer = TextRenderer()
    for value in (0.0, -0.0, 0, -0.0, 0.0, math.nan, math.nan, 1, 1.0, math.inf, -math.inf,
                  -0.0):
        out = Emitted()
        c.SYSTEM_MEMORY_USAGE.emit(out, value, {"system_memory_state": "used"},
                                   device="GPU-0")
        c.SYSTEM_MEMORY_USAGE.emit(out, value, {"system_memory_state": "free"})
        assert_renders_as_library(renderer, ScrapeRecords(
            [out], {"GPU-0": {"hw_id": "GPU-0"}}, {"host_name": "h"}))


@pytest.mark.usefixtures("unchecked")
def test_every_family_of_the_catalogue_renders_as_the_library_writes_it() -> None:
    """Each family's header (counters' `_total`, units, histograms' three series) and
    one series of it, with and without a device."""
    out = Emitted()
    for fam in FAMILIES:
        own = {name: "x" for name in fam.labels}
        for device in (None, "GPU-0", "gone"):
            if fam.kind is Kind.HISTOGRAM:
                out.histograms[fam].append((own, [(0.5, 1), (math.inf, 2)], 0.75, device))
            else:
                out.scalars[fam].append((own, 1.5, device))
    renderer = TextRenderer()
    records = ScrapeRecords([out], {"GPU-0": {"hw_id": "GPU-0", "gpu_index": "0"}},
                            {"host_name": "h"})
    assert_renders_as_library(renderer, records)
    assert_renders_as_library(renderer, records)
    text = renderer.render(one(Records(records))).decode()
    assert text.count("# TYPE ") == len(FAMILIES) and 'hw_id="gone"' not in text


def _scrape_like(pod: str) -> tuple[Records, Records]:
    """A scrape's two sources of records: the exporter's (two devices, one with pod
    labels) and the HTTP front's (no device)."""
    out = Emitted()
    for key in ("GPU-0", "GPU-1"):
        c.PROCESS_GPU_MEMORY_USAGE.emit(out, 1024, {"process_pid": "42"}, device=key)
        c.SYSTEM_MEMORY_USAGE.emit(out, 1, {"system_memory_state": "used"})
    http = Emitted()
    c.HTTP_CONNECTIONS_REFUSED.emit(http, 3, {"reason": "evicted"})
    devices = {"GPU-0": {"hw_id": "GPU-0", "gpu_index": "0", "k8s_pod_name": pod},
               "GPU-1": {"hw_id": "GPU-1", "gpu_index": "1"}}
    return (Records(ScrapeRecords([out], devices, {"host_name": "h"})),
            Records(ScrapeRecords([http], {}, {"host_name": "h"})))


@pytest.mark.usefixtures("unchecked")
def test_a_series_seen_before_is_not_made_again() -> None:
    """Only series new to the renderer, or whose device's labels changed, get their
    labels and line prefix made; the registry's other sources of records (the HTTP
    front's, without devices) do not make the exporter's devices new again."""
    made: list[str] = []
    renderer = TextRenderer()
    make = render._text_maker("underscores")

    def counted(name: str, labels: dict[str, str]) -> str:
        made.append(name)
        return make(name, labels)

    renderer._makers["text", "underscores"] = counted
    # 4 series (the host's twice in one scrape: made once).
    for pod, expected in (("a", 4), ("a", 0), ("a", 0), ("b", 1), ("b", 0)):
        registry = CollectorRegistry(auto_describe=False)
        for source in _scrape_like(pod):
            registry.register(source)
        made.clear()
        assert renderer.render(registry) == generate_latest(registry_of_families(registry))
        assert len(made) == expected, (pod, made)


def registry_of_families(registry: CollectorRegistry) -> CollectorRegistry:
    oracle = CollectorRegistry(auto_describe=False)
    for source in registry._collector_to_names:
        assert isinstance(source, Records)
        oracle.register(Families(source.records.families()))
    return oracle


def test_a_series_that_does_not_fit_its_schema_fails_every_render() -> None:
    assert metric_types.CHECK_LABELS, "tests/conftest.py sets GPU_EXPORTER_CHECK_LABELS=1"
    out = Emitted()
    c.SYSTEM_MEMORY_USAGE.emit(out, 1, {"system_memory_state": "used"})
    c.SYSTEM_MEMORY_USAGE.emit(out, 2, {"system_memory_state": "free",
                                        "sensor": "die"})  # type: ignore[typeddict-unknown-key]
    registry = one(Records(ScrapeRecords([out], {}, {"host_name": "h"})))
    renderer = TextRenderer()
    for _ in range(2):
        with pytest.raises(LabelSchemaError, match="undeclared label 'sensor'"):
            renderer.render(registry)
        with pytest.raises(LabelSchemaError, match="undeclared label 'sensor'"):
            renderer.render_openmetrics(registry)


def test_registry_order_and_collectors_without_records_are_kept() -> None:
    """A collector without records (prometheus_client's own, say) is collected where
    it stands in the registry; one with records is rendered from them."""
    out = Emitted()
    c.SYSTEM_MEMORY_USAGE.emit(out, 1, {"system_memory_state": "used"})
    http = Emitted()
    c.HTTP_CONNECTIONS_REFUSED.emit(http, 3, {"reason": "evicted"})
    records = ScrapeRecords([out], {}, {"host_name": "h"})
    plain = Families(ScrapeRecords([http], {}, {"host_name": "h"}).families())
    ours, oracle = CollectorRegistry(auto_describe=False), CollectorRegistry(
        auto_describe=False)
    for a, b in ((plain, plain), (Records(records), Families(records.families())),
                 (plain, plain)):
        ours.register(a) if a not in ours._collector_to_names else None
        oracle.register(b) if b not in oracle._collector_to_names else None
    assert isinstance(Records(records), RecordSource)
    assert not isinstance(plain, RecordSource)
    renderer = TextRenderer()
    for _ in range(2):
        for escaping in sorted(ESCAPINGS):
            assert renderer.render(ours, escaping) == generate_latest(oracle, escaping)
    text = renderer.render(ours).decode()
    assert text.index("gpu_exporter_http") < text.index("system_memory_usage_bytes")


def test_a_family_whose_every_sample_names_an_unreported_device_is_left_out() -> None:
    out = Emitted()
    fam: Family[Any] = c.SYSTEM_MEMORY_USAGE
    fam.emit(out, 1, {"system_memory_state": "used"}, device="gone")  # type: ignore[attr-defined]
    text = TextRenderer().render(one(Records(ScrapeRecords([out], {}, {})))).decode()
    assert text == ""


class Devices(Enabled):
    name = "devices"
    help = "test devices, and pod labels for the first"
    readings: ClassVar[list[GpuReading]] = []
    pod: ClassVar[str] = "train-0"

    def collect(self, sink: Sink) -> None:
        for r in self.readings:
            sink.gpu(r)
            c.PROCESS_GPU_MEMORY_USAGE.emit(sink, 1024, {"process_pid": "42"},
                                            device=r.identity.key)
        sink.label_device(self.readings[0].identity.key, {
            "k8s_namespace_name": "ml", "k8s_pod_name": self.pod,
            "k8s_container_name": "main"})


def _gpu(hw_id: str, index: int, pci: str) -> GpuReading:
    ident = GpuIdentity(hw_id=hw_id, name="card", vendor="nvidia", pci_address=pci,
                        order_key=(index,))
    return GpuReading(identity=ident, up=True, power_draw_watts=100.0 + index)


def test_a_real_scrape_renders_as_the_library_renders_it() -> None:
    """The exporter's own records (device labels joined by the exporter, its
    self-metrics) through one renderer, scrape after scrape while a GPU is added
    (every gpu_index moves) and a pod label changes, against prometheus_client's
    rendering of the same scrape's families."""
    settings = Settings(scrape_timeout_seconds=5, enabled_collectors=frozenset({"devices"}),
                        resource_labels={"host_name": "h"}, retry_interval_seconds=0.01)
    exp = GpuExporterCollector(settings, [Devices])
    exp.start()
    renderer = TextRenderer()
    try:
        Devices.readings = [_gpu("GPU-b", 1, "0000:3b:00.0"), _gpu("GPU-c", 2, "0000:5b:00.0")]
        first = exp.collect_records()
        Devices.readings = [_gpu("GPU-a", 0, "0000:1b:00.0"), *Devices.readings]
        Devices.pod = "train-1"
        second = exp.collect_records()
        for records in (first, second, first, second):
            assert_renders_as_library(renderer, records)
        text = renderer.render(make_registry(exp)).decode()
        assert 'gpu_index="1",gpu_pci_address="0000:3b:00.0"' in text, text  # 0 before
        assert text.count('k8s_pod_name="train-1"') >= 2, text
    finally:
        exp.close()
