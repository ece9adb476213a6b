"""`dump` renders through the code /metrics answers text 0.0.4 with (scrape/render.py's
TextRenderer), and its bytes are prometheus_client's `generate_latest` of the same
families: the command run in process on this host's /proc, its one scrape kept, and the
library's rendering of that scrape compared byte for byte with what `dump` printed."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from gpu_exporter.commands import cli
from gpu_exporter.scrape import render
from gpu_exporter.scrape.exporter import GpuExporterCollector
from gpu_exporter.scrape.exporter import make_registry as real_registry


class _Kept(Collector):
    """One scrape's families, served again as they were."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


@pytest.fixture
def root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level  # `dump` configures the root logger


@pytest.mark.usefixtures("root_logging")
def test_dump_prints_the_librarys_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    kept: list[_Kept] = []

    def make_registry(exporter: GpuExporterCollector) -> CollectorRegistry:
        kept.append(_Kept(list(real_registry(exporter).collect())))
        registry = CollectorRegistry(auto_describe=False)
        registry.register(kept[-1])
        return registry

    monkeypatch.setattr(cli, "make_registry", make_registry)
    rendered: list[object] = []
    original = render.TextRenderer.render

    def spy(self: render.TextRenderer, registry: Collector, escaping: str = "underscores",
            ) -> bytes:
        rendered.append(registry)
        return original(self, registry, escaping)

    monkeypatch.setattr(render.TextRenderer, "render", spy)
    res = CliRunner().invoke(cli.main, [
        "--path.sysfs=/nonexistent", "--no-collector.ebpf", "--no-collector.nvidia",
        "--host.network-interfaces-exclude=.*", "dump"])
    assert res.exit_code == 0, res.output
    assert len(kept) == 1 and len(rendered) == 1  # dump rendered through TextRenderer
    families = kept[0].families
    assert any(f.name == "system_memory_usage_bytes" for f in families), [
        f.name for f in families]
    oracle = CollectorRegistry(auto_describe=False)
    oracle.register(kept[0])
    assert res.stdout == generate_latest(oracle).decode()
