"""Resource labels on every series: host_name, service_name, OTEL_RESOURCE_ATTRIBUTES."""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Mapping
from urllib.parse import unquote

from gpu_exporter.model import catalogue
from gpu_exporter.model.settings import ConfigError

log = logging.getLogger("gpu_exporter.resource")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def _reserved() -> set[str]:
    return {"le", "quantile", *catalogue.ALL_LABELS}


def resource_labels(env: Mapping[str, str], hostname: str | None = None) -> dict[str, str]:
    """Labels from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (W3C baggage-like
    `key=value,key=value`, values percent-decoded). Raises ConfigError on a malformed
    entry. A key naming a label the exporter sets itself is skipped with one warning:
    the OpenTelemetry Operator injects k8s.pod.name and its kin into every pod it
    instruments, and the exporter's own pod is not the pod of its series. A variable
    that is not UTF-8 is a ConfigError too: a label value must encode, or every scrape
    would fail while the exporter looks healthy."""
    labels = {"host_name": _replace_invalid(hostname or socket.gethostname())}
    raw = _utf8("OTEL_RESOURCE_ATTRIBUTES", env.get("OTEL_RESOURCE_ATTRIBUTES", "")).strip()
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
    service = _utf8("OTEL_SERVICE_NAME", env.get("OTEL_SERVICE_NAME", "")).strip()
    if service:
        labels["service_name"] = service
    return labels


def _utf8(variable: str, value: str) -> str:
    """`value` when it is UTF-8 text. Python hands an environment variable's invalid
    bytes over as lone surrogates (U+DC80-U+DCFF, PEP 383): they cannot be written out."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        byte = f"byte 0x{ord(bad) - 0xDC00:02x}" if 0xDC80 <= ord(bad) <= 0xDCFF else (
            f"character U+{ord(bad):04X}")
        raise ConfigError(
            f"{variable} is not UTF-8 text ({byte} at position {exc.start}): set it to "
            "UTF-8 (percent-encode other bytes in OTEL_RESOURCE_ATTRIBUTES values)"
        ) from None
    return value


def _replace_invalid(text: str) -> str:
    """The host name as UTF-8, an invalid byte replaced (the kernel takes any bytes)."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
