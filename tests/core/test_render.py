"""gpu_exporter/scrape/render.py writes what prometheus_client's `generate_latest` (text 0.0.4
and 1.0.0, OpenMetrics 1.0.0; every name escaping) writes, byte for byte: on every golden
exposition, and on randomised families (label escaping, NaN/Inf, histograms, units,
timestamps, the OpenMetrics-only samples, names that are not legacy ones), rendered
twice so that the second render reuses the first one's label text. And the web App
answers every scraper's default Accept header (tests/scrapers.py: Prometheus 2.x, 3.x,
vmagent) from it, with prometheus_client's Content-Type and bytes."""

from __future__ import annotations

import asyncio
import copy
import gzip
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
from prometheus_client.exposition import choose_encoder, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from gpu_exporter.http.app import App
from gpu_exporter.http.server import Request
from gpu_exporter.scrape.render import ESCAPINGS, TextRenderer
from tests.scrapers import PROMETHEUS_2, PROMETHEUS_3, SCRAPERS, VMAGENT

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


def assert_same(registry: CollectorRegistry, renderer: TextRenderer | None = None,
                escapings: tuple[str, ...] = ("underscores", "allow-utf-8")) -> None:
    """Both formats under each escaping (by default those scrapers ask for: Prometheus
    2 and vmagent `underscores`, Prometheus 3 `allow-utf-8`), twice each."""
    renderer = renderer or TextRenderer()
    for escaping in escapings:
        expected = generate_latest(registry, escaping)
        assert renderer.render(registry, escaping) == expected  # fresh
        assert renderer.render(registry, escaping) == expected  # from the previous lines
        expected = openmetrics_latest(registry, escaping)  # type: ignore[no-untyped-call]
        assert renderer.render_openmetrics(registry, escaping) == expected
        assert renderer.render_openmetrics(registry, escaping) == expected


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


# Names Prometheus 3 allows (any UTF-8; label names not starting "__"), with legacy ones.
_utf8_name = st.one_of(_name, st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]),
                                      min_size=1, max_size=8))
_utf8_label_name = st.one_of(_label_name, _utf8_name.filter(lambda k: not k.startswith("__")))


@st.composite
def families(draw: st.DrawFn, names: st.SearchStrategy[str] = _name,
             label_names: st.SearchStrategy[str] = _label_name) -> list[Metric]:
    out: list[Metric] = []
    for i in range(draw(st.integers(0, 6))):
        name = f"{draw(names)}_{i}"
        doc = draw(_text)
        keys = sorted(draw(st.sets(label_names.filter(lambda k: k != "le"), max_size=3)))
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


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(families(_utf8_name, _utf8_label_name), families(_utf8_name, _utf8_label_name))
def test_names_of_any_utf8_render_as_prometheus_client_does_in_every_escaping(
        first: list[Metric], second: list[Metric]) -> None:
    """Our names are legacy ones, but the renderer is the library's for any name: a name
    Prometheus 3 allows is quoted (`allow-utf-8`) or escaped (the others) alike."""
    renderer = TextRenderer()
    assert_same(registry_of(first), renderer, tuple(sorted(ESCAPINGS)))
    assert_same(registry_of(second + first[:2]), renderer, tuple(sorted(ESCAPINGS)))


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


def _library_refused(environ: object, start_response: object) -> list[bytes]:
    raise AssertionError("answered by prometheus_client's application")


def test_every_scraper_is_answered_by_our_renderer_with_the_library_bytes() -> None:
    """Each golden, scraped with the Accept header of each scraper (tests/scrapers.py):
    prometheus_client's own application is never asked, and the answer is what the
    library writes for that header, Content-Type included, gzip or not."""
    goldens = sorted(GOLDEN.rglob("*.prom"))
    assert len(goldens) >= 5
    # The three the benchmarks compare, by what they are answered.
    assert VMAGENT.content_type.startswith("text/plain; version=0.0.4")
    assert PROMETHEUS_2.content_type.endswith("escaping=underscores")
    assert PROMETHEUS_3.content_type.endswith("escaping=allow-utf-8")
    for path in goldens:
        text = path.read_text().replace(" VOLATILE\n", " 0\n")
        app = App(registry_of(list(text_string_to_metric_families(text)), describe=True))
        app.metrics_app = _library_refused
        for scraper in SCRAPERS:
            encoder, content_type = choose_encoder(scraper.accept)
            assert content_type == scraper.content_type, scraper.name
            expected = encoder(app.registry)
            for _ in range(2):  # the second from the first's lines
                status, headers, body = _get(app, "/metrics", {"accept": scraper.accept})
                assert (status, headers["Content-Type"], body) == (
                    200, scraper.content_type, expected), (path.name, scraper.name)
            status, headers, body = _get(app, "/metrics", {"accept": scraper.accept,
                                                           "accept-encoding": "gzip"})
            assert headers["Content-Encoding"] == "gzip" and gzip.decompress(body) == expected


def test_the_app_leaves_only_name_filters_and_other_versions_to_the_library() -> None:
    fam = GaugeMetricFamily("g", "a gauge", labels=["k"])
    fam.add_metric(['a "quoted"\nvalue\\'], math.nan)
    registry = registry_of([fam], describe=True)
    app = App(registry)
    library: list[int] = []
    original = app.metrics_app

    def counting(environ: Any, start_response: Any) -> Any:
        library.append(1)
        return original(environ, start_response)

    app.metrics_app = counting
    text = generate_latest(registry)
    status, headers, body = _get(app, "/metrics", {})
    assert (status, body, headers["Content-Type"]) == (
        200, text, "text/plain; version=0.0.4; charset=utf-8")
    status, headers, body = _get(app, "/metrics", {"accept-encoding": "gzip"})
    assert gzip.decompress(body) == text and headers["Content-Encoding"] == "gzip"
    head = asyncio.run(app(Request("HEAD", "/metrics", "1.1", {}, "127.0.0.1")))
    assert head.head_only and head.body == text
    # Every escaping, both formats, written with spaces as a person would: ours.
    for accept in ("application/openmetrics-text; version=1.0.0; escaping=allow-utf-8",
                   "application/openmetrics-text; version=1.0.0; escaping=underscores",
                   "application/openmetrics-text; version=1.0.0; escaping=dots",
                   "application/openmetrics-text; version=1.0.0; escaping=values",
                   "application/openmetrics-text",
                   "text/plain; version=1.0.0", "text/plain; version=1.0.0; escaping=values"):
        encoder, content_type = choose_encoder(accept)
        status, headers, body = _get(app, "/metrics", {"accept": accept})
        assert (status, headers["Content-Type"], body) == (
            200, content_type, encoder(registry)), accept
    assert not library
    # `name[]` filters and OpenMetrics 2.0.0: the library's own application.
    status, headers, body = _get(app, "/metrics?name[]=g", {})
    assert body == text and len(library) == 1
    accept = "application/openmetrics-text; version=2.0.0"
    status, headers, body = _get(app, "/metrics", {"accept": accept})
    assert headers["Content-Type"] == choose_encoder(accept)[1] and len(library) == 2
    # An OpenMetrics version prometheus_client does not write: ours, text 0.0.4.
    status, headers, body = _get(app, "/metrics",
                                 {"accept": "application/openmetrics-text; version=0.0.1"})
    assert body == text and len(library) == 2
