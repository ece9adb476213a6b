"""The HTTP front's self-metrics come from a collector of its own (http/selfmetrics.py):
the scrape layer's collector emits none of them, and the two together in one registry
serve the front's families last, with the resource labels, in catalogue order."""

from __future__ import annotations

from prometheus_client import generate_latest

from gpu_exporter.collectors.base import Availability, Collector, Sink
from gpu_exporter.http.selfmetrics import HttpSelfMetrics
from gpu_exporter.model import catalogue as c
from gpu_exporter.model.settings import Settings
from gpu_exporter.scrape.exporter import GpuExporterCollector, make_registry
from gpu_exporter.scrape.render import TextRenderer


class _Host(Collector):
    name = "host"
    help = "one self-metric"

    def start(self) -> Availability:
        return Availability.enabled()

    def collect(self, sink: Sink) -> None:
        c.PROCESSES_FOLDED.emit(sink, 3, {})  # a family after the front's in the old order


def test_front_families_come_from_their_own_collector_last() -> None:
    settings = Settings(enabled_collectors=frozenset({"host"}),
                        resource_labels={"host_name": "h"})
    exp = GpuExporterCollector(settings, [_Host])
    exp.start()
    try:
        registry = make_registry(exp)
        alone = generate_latest(registry).decode()
        assert "gpu_exporter_http_connections_refused_total" not in alone
        registry.register(HttpSelfMetrics(
            lambda: {"head_timeout": 2, "client_gone": 0}, settings.resource_labels))
        text = generate_latest(registry).decode()
        head, sep, tail = text.partition(
            "# HELP gpu_exporter_http_connections_refused_total Connections the HTTP front "
            "refused or closed early, by reason (each counted once).\n")
        assert sep
        helps = [line for line in alone.splitlines() if line.startswith("# HELP")]
        assert [line for line in head.splitlines() if line.startswith("# HELP")] == helps
        assert helps[-1].startswith("# HELP gpu_exporter_processes_folded_total ")
        assert tail == (
            "# TYPE gpu_exporter_http_connections_refused_total counter\n"
            'gpu_exporter_http_connections_refused_total{host_name="h",reason="client_gone"} 0.0\n'
            'gpu_exporter_http_connections_refused_total{host_name="h",reason="head_timeout"} 2.0\n'
        )
        rendered = TextRenderer().render(registry).decode()
        assert rendered.endswith(tail) and rendered.count("# HELP") == text.count("# HELP")
        # A name[] filter finds the front's collector by its describe().
        only = registry.restricted_registry(["gpu_exporter_http_connections_refused_total"])
        assert 'reason="head_timeout"} 2.0' in generate_latest(only).decode()
        order = [f.name for f in c.CATALOGUE]
        assert order.index("gpu_exporter_processes_folded_total") < order.index(
            "gpu_exporter_http_connections_refused_total")
    finally:
        exp.close()
