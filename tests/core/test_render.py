"""gpu_exporter/scrape/render.py writes what prometheus_client's `generate_latest` (text 0.0.4
and OpenMetrics 1.0.0) writes, byte for byte: on every golden exposition, and on
randomised families (label escaping, NaN/Inf, histograms, units, timestamps, the
OpenMetrics-only samples), rendered twice so that the second render reuses the first
one's label text. And the web App serves it only for
the default negotiations (text 0.0.4, and the OpenMetrics 1.0.0 that Prometheus asks
for)."""

from __future__ import annotations

import asyncio
import copy
import gzip
import math
from collections.abc import Iterator
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.core import (
    CounterMetricFamily,
    Exemplar,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
    UnknownMetricFamily,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from gpu_exporter.http.app import App
from gpu_exporter.http.server import Request
from gpu_exporter.scrape.render import TextRenderer

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


class Static(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def registry_of(families: list[Metric], describe: bool = False) -> CollectorRegistry:
    """`describe`: the registry knows the names (for `name[]`); random families may
    repeat a name, which a described registry refuses."""
    registry = CollectorRegistry(auto_describe=describe)
    registry.register(Static(families))
    return registry


def assert_same(registry: CollectorRegistry, renderer: TextRenderer | None = None) -> None:
    renderer = renderer or TextRenderer()
    expected = generate_latest(registry)
    assert renderer.render(registry) == expected  # fresh
    assert renderer.render(registry) == expected  # from the previous render's label text
    expected = openmetrics_latest(registry)  # type: ignore[no-untyped-call]
    assert renderer.render_openmetrics(registry) == expected
    assert renderer.render_openmetrics(registry) == expected


def test_every_golden_renders_as_prometheus_client_does() -> None:
    goldens = sorted(GOLDEN.rglob("*.prom"))
    assert len(goldens) >= 5
    for path in goldens:
        text = path.read_text().replace(" VOLATILE\n", " 0\n")
        families = list(text_string_to_metric_families(text))
        assert families, path
        assert_same(registry_of(families))


_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
_name = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,10}", fullmatch=True)
_label_name = st.from_regex(r"[a-zA-Z][a-zA-Z0-9_]{0,8}", fullmatch=True)
_value = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.integers(-2**60, 2**60), st.sampled_from([math.inf, -math.inf, math.nan,
                                                                 1e6, 1234567.0, 0.1]))
_stamp = st.one_of(st.none(), st.floats(0, 2e9, allow_nan=False))
_labels = st.dictionaries(_label_name, _text, max_size=4)


@st.composite
def families(draw: st.DrawFn) -> list[Metric]:
    out: list[Metric] = []
    for i in range(draw(st.integers(0, 6))):
        name = f"{draw(_name)}_{i}"
        doc = draw(_text)
        keys = sorted(draw(st.sets(_label_name.filter(lambda k: k != "le"), max_size=3)))
        kind = draw(st.sampled_from(["gauge", "counter", "untyped", "histogram",
                                     "gaugehistogram", "info", "stateset"]))
        rows = draw(st.lists(st.tuples(st.lists(_text, min_size=len(keys), max_size=len(keys)),
                                       _value, _stamp), max_size=4))
        fam: Metric
        if kind == "gauge":
            unit = draw(st.sampled_from(["", "bytes", "seconds"]))
            fam = GaugeMetricFamily(name + (f"_{unit}" if unit else ""), doc, labels=keys,
                                    unit=unit)
        elif kind == "counter":
            fam = CounterMetricFamily(name, doc, labels=keys)
        elif kind == "untyped":
            fam = UnknownMetricFamily(name, doc, labels=keys)
        elif kind == "info":
            fam = InfoMetricFamily(name, doc, labels=keys)
            for values, _, stamp in rows:
                info = draw(_labels)
                fam.add_metric(values, {k: v for k, v in info.items() if k not in keys}, stamp)
            out.append(fam)
            continue
        elif kind == "stateset":
            fam = StateSetMetricFamily(name, doc, labels=keys)
            for values, _, stamp in rows:
                fam.add_metric(values, {name: draw(st.booleans())}, stamp)
            out.append(fam)
            continue
        else:
            hist = HistogramMetricFamily if kind == "histogram" else GaugeHistogramMetricFamily
            fam = hist(name, doc, labels=keys)
            for values, total, stamp in rows:
                buckets = [("0.1", 1.0), ("1e+06", 2.0), ("+Inf", 3.0)]
                if kind == "histogram":
                    fam.add_metric(values, buckets, float(total), stamp)
                else:
                    fam.add_metric(values, buckets, float(total), stamp)
            out.append(fam)
            continue
        for values, value, stamp in rows:
            fam.add_metric(values, value, stamp)
        if kind == "counter" and rows and draw(st.booleans()):
            fam.add_sample(name + "_created", dict(zip(keys, rows[0][0], strict=True)), 1.5e9)
        out.append(fam)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(families(), families())
def test_random_families_render_as_prometheus_client_does(
        first: list[Metric], second: list[Metric]) -> None:
    renderer = TextRenderer()
    assert_same(registry_of(first), renderer)
    # Another scrape with other series (some shared): label text kept from the last one.
    assert_same(registry_of(second + first[:2]), renderer)


def _revalued(families: list[Metric], values: list[object]) -> list[Metric]:
    """The same series with other values (as the next scrape has them)."""
    out = []
    for i, fam in enumerate(families):
        again = copy.copy(fam)
        again.samples = [s._replace(value=values[(i + j) % len(values)])
                         for j, s in enumerate(fam.samples)]
        out.append(again)
    return out


_changed = st.lists(st.one_of(_value, st.sampled_from([0.0, -0.0, 0, 1, 1.0, True])),
                    min_size=1, max_size=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(families(), _changed)
def test_a_series_whose_value_changed_is_written_with_the_new_value(
        first: list[Metric], values: list[object]) -> None:
    renderer = TextRenderer()
    assert_same(registry_of(first), renderer)
    # The next scrape: same series, other values (the line is reused only for the same).
    assert_same(registry_of(_revalued(first, values)), renderer)


def test_equal_values_written_apart_are_written_apart() -> None:
    """0.0 and -0.0 are equal and written apart; NaN is not equal to itself; 1 and 1.0
    are written alike: each render writes what prometheus_client writes."""
    renderer = TextRenderer()
    for value in (0.0, -0.0, 0, -0.0, 1, 1.0, math.nan, math.nan, math.inf, -math.inf,
                  2**60 + 1, 2**60, 0.1):
        family = GaugeMetricFamily("g", "h", labels=["a"])
        family.add_metric(["x"], value)  # type: ignore[arg-type]
        assert_same(registry_of([family]), renderer)


def test_exemplars_are_rendered_by_the_library() -> None:
    fam = CounterMetricFamily("c", "a counter", labels=["k"])
    fam.add_metric(["v"], 3.0)
    fam.samples[0] = fam.samples[0]._replace(exemplar=Exemplar({"trace_id": "abc"}, 1.0, 2.0))
    assert_same(registry_of([fam]))


def _get(app: App, target: str, headers: dict[str, str], method: str = "GET") -> tuple[
        int, dict[str, str], bytes]:
    request = Request(method, target, "1.1", headers, "127.0.0.1")
    response = asyncio.run(app(request))
    return response.status, dict(response.headers), response.body


def test_the_app_renders_the_default_variant_only() -> None:
    fam = GaugeMetricFamily("g", "a gauge", labels=["k"])
    fam.add_metric(['a "quoted"\nvalue\\'], math.nan)
    registry = registry_of([fam], describe=True)
    app = App(registry)
    rendered: list[int] = []
    original = app.text.render

    def counting(reg: Collector) -> bytes:
        rendered.append(1)
        return original(reg)

    app.text.render = counting  # type: ignore[method-assign,assignment]
    rendered_om: list[int] = []
    original_om = app.text.render_openmetrics

    def counting_om(reg: Collector) -> bytes:
        rendered_om.append(1)
        return original_om(reg)

    app.text.render_openmetrics = counting_om  # type: ignore[method-assign,assignment]
    text = generate_latest(registry)
    status, headers, body = _get(app, "/metrics", {})
    assert (status, body, headers["Content-Type"]) == (
        200, text, "text/plain; version=0.0.4; charset=utf-8")
    status, headers, body = _get(app, "/metrics", {"accept-encoding": "gzip"})
    assert gzip.decompress(body) == text and headers["Content-Encoding"] == "gzip"
    assert len(rendered) == 2
    head = asyncio.run(app(Request("HEAD", "/metrics", "1.1", {}, "127.0.0.1")))
    assert head.head_only and head.body == text and len(rendered) == 3
    # What Prometheus 2 asks for: OpenMetrics 1.0.0 first.
    om_text = openmetrics_latest(registry)  # type: ignore[no-untyped-call]
    prometheus = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                  "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
    status, headers, body = _get(app, "/metrics", {"accept": prometheus})
    assert (body, headers["Content-Type"]) == (om_text, "application/openmetrics-text; "
                                               "version=1.0.0; charset=utf-8; escaping=underscores")
    assert len(rendered) == 3 and len(rendered_om) == 1
    # escaping=, another version, text 1.0.0 and name[] stay prometheus_client's.
    for accept in ("application/openmetrics-text; version=1.0.0; escaping=allow-utf-8",
                   "application/openmetrics-text; version=1.0.0; escaping=underscores",
                   "text/plain; version=1.0.0"):
        status, headers, body = _get(app, "/metrics", {"accept": accept})
        assert status == 200 and body in (om_text, text), accept
    status, headers, body = _get(app, "/metrics?name[]=g", {})
    assert body == text
    assert len(rendered) == 3 and len(rendered_om) == 1
    # An OpenMetrics version prometheus_client does not write: it answers text 0.0.4.
    status, headers, body = _get(app, "/metrics",
                                 {"accept": "application/openmetrics-text; version=0.0.1"})
    assert body == text and len(rendered) == 4
