from __future__ import annotations

import logging

import pytest

from gpu_exporter.model import catalogue
from gpu_exporter.model.settings import ConfigError
from gpu_exporter.scrape.resource import resource_labels


def test_host_name_service_and_attributes() -> None:
    labels = resource_labels(
        {
            "OTEL_SERVICE_NAME": "gpu-fleet",
            "OTEL_RESOURCE_ATTRIBUTES": "team=ml-platform, deployment.environment=prod,"
            "cost.center=a%2Cb",
        },
        hostname="node-7",
    )
    assert labels == {
        "host_name": "node-7",
        "service_name": "gpu-fleet",
        "team": "ml-platform",
        "deployment_environment": "prod",
        "cost_center": "a,b",
    }


def test_host_name_can_be_overridden() -> None:
    labels = resource_labels({"OTEL_RESOURCE_ATTRIBUTES": "host.name=gpu-01"}, hostname="x")
    assert labels["host_name"] == "gpu-01"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("team", "expected key=value"),
        ("bad key=1", "invalid OTEL_RESOURCE_ATTRIBUTES key 'bad key'"),
        ("9lives=1", "not starting with a digit"),
        ("k8s.pod.name=p,=x", "invalid OTEL_RESOURCE_ATTRIBUTES key ''"),
    ],
)
def test_malformed_attributes_are_an_error(raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resource_labels({"OTEL_RESOURCE_ATTRIBUTES": raw})


def test_attributes_naming_the_exporters_own_labels_are_skipped_with_one_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    # What the OpenTelemetry Operator injects into a pod it instruments, and more.
    raw = ("k8s.pod.name=exporter-x7,k8s.namespace.name=monitoring,k8s.container.name=exp,"
           "k8s.pod.uid=1234,k8s.node.name=node-7,k8s.deployment.name=gpu,hw.id=x,"
           "gpu_index=3,process.pid=1,__name__=x,host.name=node-7.example")
    with caplog.at_level(logging.WARNING, logger="gpu_exporter"):
        labels = resource_labels({"OTEL_RESOURCE_ATTRIBUTES": raw}, hostname="h")
    assert labels == {"host_name": "node-7.example", "k8s_node_name": "node-7",
                      "k8s_deployment_name": "gpu"}
    assert len(caplog.records) == 1, caplog.records
    message = caplog.records[0].getMessage()
    for key in ("k8s.pod.name", "k8s.namespace.name", "k8s.container.name", "k8s.pod.uid",
                "hw.id", "gpu_index", "process.pid", "__name__"):
        assert key in message, (key, message)
    assert "k8s.node.name" not in message and "host.name" not in message


def test_every_label_of_the_catalogue_is_skipped() -> None:
    # Derived from the catalogue, not a list here: a new family's label is covered.
    names = {n for m in catalogue.CATALOGUE for n in m.labels}
    names.update(catalogue.DEVICE_LABELS, catalogue.PROCESS_LABELS)
    raw = ",".join(f"{n}=x" for n in sorted(names))
    assert resource_labels({"OTEL_RESOURCE_ATTRIBUTES": raw}, hostname="h") == {
        "host_name": "h"}


@pytest.mark.parametrize("variable", ["OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"])
def test_a_variable_that_is_not_utf8_is_refused(variable: str) -> None:
    # The byte 0xff as Python hands it over from the environment (PEP 383).
    value = "gpu\udcfffleet" if variable == "OTEL_SERVICE_NAME" else "team=ml\udcff"
    with pytest.raises(ConfigError, match=f"^{variable} is not UTF-8 text "
                       r"\(byte 0xff at position \d+\)"):
        resource_labels({variable: value}, hostname="node-7")


def test_percent_encoded_bytes_that_are_not_utf8_are_replaced() -> None:
    labels = resource_labels({"OTEL_RESOURCE_ATTRIBUTES": "team=ml%FF"}, hostname="n")
    assert labels["team"] == "ml\ufffd"
    labels["team"].encode("utf-8")


def test_a_host_name_that_is_not_utf8_is_replaced() -> None:
    assert resource_labels({}, hostname="node\udcff7")["host_name"] == "node\ufffd7"
