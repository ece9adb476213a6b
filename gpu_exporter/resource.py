"""Resource labels on every series: host_name, service_name, OTEL_RESOURCE_ATTRIBUTES."""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Mapping
from urllib.parse import unquote

from gpu_exporter import catalogue
from gpu_exporter.settings import ConfigError

log = logging.getLogger("gpu_exporter.resource")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def _reserved() -> set[str]:
    return {"le", "quantile", *catalogue.ALL_LABELS}


def resource_labels(env: Mapping[str, str], hostname: str | None = None) -> dict[str, str]:
    """Labels from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (W3C baggage-like
    `key=value,key=value`, values percent-decoded). Raises ConfigError on a malformed
    entry. A key naming a label the exporter sets itself is skipped with one warning:
    the OpenTelemetry Operator injects k8s.pod.name and its kin into every pod it
    instruments, and the exporter's own pod is not the pod of its series."""
    labels = {"host_name": hostname or socket.gethostname()}
    raw = env.get("OTEL_RESOURCE_ATTRIBUTES", "").strip()
    reserved = _reserved()
    skipped: list[str] = []
    if raw:
        for item in raw.split(","):
            item = item.strip()
            if not item:
                continue
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep:
                raise ConfigError(
                    f"invalid OTEL_RESOURCE_ATTRIBUTES entry {item!r}: expected key=value"
                )
            if not _KEY.match(key):
                raise ConfigError(
                    f"invalid OTEL_RESOURCE_ATTRIBUTES key {key!r}: use letters, digits, "
                    "'_' and '.', not starting with a digit"
                )
            label = catalogue.prom_label(key)
            if label.startswith("__") or label in reserved:
                skipped.append(key)
                continue
            labels[label] = unquote(value.strip())
    if skipped:
        log.warning("OTEL_RESOURCE_ATTRIBUTES: skipped %s: labels the exporter sets itself "
                    "on its series (or, starting with __, that Prometheus reserves)",
                    ", ".join(dict.fromkeys(skipped)))
    service = env.get("OTEL_SERVICE_NAME", "").strip()
    if service:
        labels["service_name"] = service
    return labels
