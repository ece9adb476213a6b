"""OpenLIT's GPU collector (PyPI `openlit`, openlit.instrumentation.gpu) served for
Prometheus to scrape, for the peer measurement in docs/performance.md (issue #26).

OpenLIT reads NVML through nvidia-ml-py in OpenTelemetry observable-gauge callbacks;
here its meter provider has the OpenTelemetry Prometheus reader, so each scrape runs its
callbacks, as each of our scrapes runs our collectors. Run it with an interpreter that
has `openlit` (installed `--no-deps`), `opentelemetry-sdk`,
`opentelemetry-instrumentation`, `opentelemetry-exporter-otlp`,
`opentelemetry-exporter-prometheus` and `nvidia-ml-py`: openlit's full dependency set
(LLM SDKs, a dozen instrumentations) is not part of this project's environment.

Usage: python tests/bench/openlit_peer.py PORT   (with LD_LIBRARY_PATH and
FAKE_NVML_SCENARIO set for the fake NVML, as tests/fake_nvml/scenario.py's env())
"""

from __future__ import annotations

import signal
import sys
import threading

from openlit.instrumentation.gpu import GPUInstrumentor  # type: ignore[import-not-found]
from opentelemetry import metrics  # type: ignore[import-not-found]
from opentelemetry.exporter.prometheus import (  # type: ignore[import-not-found]
    PrometheusMetricReader,
)
from opentelemetry.sdk.metrics import MeterProvider  # type: ignore[import-not-found]
from prometheus_client import start_http_server


def main() -> None:
    metrics.set_meter_provider(MeterProvider(metric_readers=[PrometheusMetricReader()]))
    GPUInstrumentor().instrument(application_name="bench", environment="bench")
    start_http_server(int(sys.argv[1]), addr="127.0.0.1")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()


if __name__ == "__main__":
    main()
