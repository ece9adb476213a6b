"""The HTTP front's own self-metrics (gpu_exporter_http_connections_refused_total), as a
collector of their own in the registry that /metrics serves: registered next to the
exporter's by whoever builds the server (`serve`), so that the scrape layer below knows
nothing of the HTTP front. Registered after the exporter's collector, its families come
last in a scrape, as they come last in the catalogue."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import Metric as PromMetric
from prometheus_client.registry import Collector as PromCollector

from gpu_exporter.model import catalogue as c
from gpu_exporter.model.metric_types import Emitted
from gpu_exporter.scrape.records import ScrapeRecords, prometheus_family


class HttpSelfMetrics(PromCollector):
    """`refusals()`: the connections refused or closed early so far, by reason
    (`HttpServer.refusal_counts`); every reason is reported, 0 until it happens."""

    def __init__(self, refusals: Callable[[], Mapping[c.HttpRefusalReason, int]],
                 resource_labels: Mapping[str, str]) -> None:
        self._refusals = refusals
        self._resource = dict(resource_labels)

    def describe(self) -> Iterator[PromMetric]:
        """Its families, empty: a scrape's `name[]` filter finds this collector."""
        return (prometheus_family(fam) for fam in c.HTTP_FAMILIES)

    def collect(self) -> Iterator[PromMetric]:
        return iter(self.collect_records().families())

    def collect_records(self) -> ScrapeRecords:
        """Its series as records, which the renderer writes without prometheus_client's
        families (scrape/records_render.py)."""
        out = Emitted()
        for reason, n in sorted(self._refusals().items()):
            c.HTTP_CONNECTIONS_REFUSED.emit(out, n, {"reason": reason})
        return ScrapeRecords((out,), {}, self._resource)
