from __future__ import annotations

import pytest

from gpu_exporter.resource import resource_labels
from gpu_exporter.settings import ConfigError


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
        ("hw.id=x", "label the exporter sets itself"),
        ("gpu_index=3", "label the exporter sets itself"),
        ("__name__=x", "label the exporter sets itself"),
    ],
)
def test_invalid_attributes_are_an_error(raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resource_labels({"OTEL_RESOURCE_ATTRIBUTES": raw})
