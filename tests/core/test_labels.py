"""The label schemas: every series a scrape produces fits its family's declared labels,
mypy sees a wrong label at the emit line, and the label names we take from the
OpenTelemetry conventions are theirs."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest
from opentelemetry.semconv._incubating.attributes import hw_attributes as hw
from prometheus_client.exposition import generate_latest

from gpu_exporter.collectors.base import Availability, Collector, Sink
from gpu_exporter.model import catalogue as c
from gpu_exporter.model import metric_types
from gpu_exporter.model.metric_types import LabelSchemaError
from gpu_exporter.model.settings import Settings
from gpu_exporter.scrape.exporter import GpuExporterCollector, make_registry
from tests.helpers import BIN, REPO


class Emits(Collector):
    name = "emits"
    help = "emits what the test puts in `emit`"
    emit = staticmethod(lambda sink: None)

    def start(self) -> Availability:
        return Availability.enabled()

    def collect(self, sink: Sink) -> None:
        type(self).emit(sink)


def _scrape(emit: object) -> str:
    Emits.emit = staticmethod(emit)  # type: ignore[assignment]
    exp = GpuExporterCollector(Settings(enabled_collectors=frozenset({"emits"}),
                                        resource_labels={"host_name": "h"}), [Emits])
    exp.start()
    try:
        return generate_latest(make_registry(exp)).decode()
    finally:
        exp.close()


def test_the_suite_checks_every_series() -> None:
    assert metric_types.CHECK_LABELS, "tests/conftest.py sets GPU_EXPORTER_CHECK_LABELS=1"


def test_a_declared_series_passes() -> None:
    text = _scrape(lambda sink: c.SYSTEM_MEMORY_USAGE.emit(
        sink, 1, {"system_memory_state": "used"}))
    assert 'system_memory_usage_bytes{host_name="h",system_memory_state="used"} 1.0' in text


def test_a_label_the_family_does_not_declare_fails_the_scrape() -> None:
    with pytest.raises(LabelSchemaError, match="undeclared label 'sensor'"):
        _scrape(lambda sink: c.SYSTEM_MEMORY_USAGE.emit(
            sink, 1, {"system_memory_state": "used", "sensor": "die"}))  # type: ignore[typeddict-unknown-key]


def test_a_missing_required_label_fails_the_scrape() -> None:
    with pytest.raises(LabelSchemaError, match="missing required label 'feature'"):
        _scrape(lambda sink: c.FEATURE_STATUS.emit(sink, 1, {"state": "enabled"}))  # type: ignore[typeddict-item]


def test_an_optional_label_may_be_absent_or_present() -> None:
    def emit(sink: Sink) -> None:
        c.FEATURE_STATUS.emit(sink, 1, {"feature": "x", "state": "enabled"})
        c.FEATURE_STATUS.emit(sink, 1, {"feature": "y", "state": "enabled", "hw_id": "G"})

    text = _scrape(emit)
    assert 'feature="x",host_name="h",state="enabled"' in text
    assert 'feature="y",host_name="h",hw_id="G",state="enabled"' in text


def test_mypy_rejects_a_wrong_label_at_the_emit_line(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        from gpu_exporter.model import catalogue as c
        from gpu_exporter.model.metric_types import Emitted

        out = Emitted()
        c.HW_GPU_TEMPERATURE.emit(out, 40.0, {"sensor": "die"}, device="GPU-0")
        c.HW_GPU_TEMPERATURE.emit(out, 40.0, {"sensr": "die"}, device="GPU-0")
        c.PROCESS_GPU_UTILIZATION.emit(out, 0.5, {"process_pid": "1"})
        c.HW_ERRORS.emit(out, 1, {"hw_type": "gpu", "error_type": "bogus"})
    """)
    (tmp_path / "emit_check.py").write_text(code)
    res = subprocess.run(
        [str(BIN / "mypy"), "--strict", "--no-error-summary", "emit_check.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={"MYPYPATH": str(REPO), "PATH": str(BIN)},
    )
    errors = [line for line in res.stdout.splitlines() if ": error:" in line]
    assert [int(line.split(":")[1]) for line in errors] == [7, 7, 8, 9], res.stdout


def test_opentelemetry_names_are_the_conventions() -> None:
    ours = c.ALL_LABELS
    for attribute in (hw.HW_ID, hw.HW_NAME, hw.HW_VENDOR, hw.HW_MODEL, hw.HW_PARENT,
                      hw.HW_TYPE, hw.HW_STATE, hw.HW_GPU_TASK, hw.HW_DRIVER_VERSION,
                      hw.HW_FIRMWARE_VERSION, hw.HW_SERIAL_NUMBER):
        assert c.prom_label(attribute) in ours, attribute


def test_every_family_declares_its_scope() -> None:
    for m in c.CATALOGUE:
        names = set(m.schema.names)
        if m.scope is c.Scope.DEVICE:
            assert m.schema.required >= {"hw_vendor", "gpu_index"}, m.name
        if m.scope is c.Scope.PROCESS:
            # process_pid is absent on the series that folds the processes beyond the cap
            assert "gpu_index" in m.schema.required, m.name
            assert {"process_pid", "process_executable_name"} <= set(names), m.name
        if m.scope is c.Scope.CUDA:
            assert "hw_id" in names and "hw_id" not in m.schema.required, m.name
        if m.scope in (c.Scope.HOST, c.Scope.SELF):
            assert names == set(m.own.names), m.name
