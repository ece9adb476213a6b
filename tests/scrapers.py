"""The Accept headers scrapers send by default, verbatim from their sources, and what
prometheus_client answers each with (its Content-Type). The render tests
(tests/core/test_render.py) check that the exporter answers every one of them from its
own renderer with prometheus_client's bytes; the benchmarks (tests/bench/paired.py
`scrapers`) scrape with them.

Sources (fetched from the projects' repositories, at the tags named):
- Prometheus 2.35-2.48 (but 2.40.0): the constant `scrapeAcceptHeader` of
  scrape/scrape.go (v2.35.0, v2.42.0, v2.48.0). The Debian package CI uses is 2.42.
- Prometheus 2.49-2.55: `acceptHeader(DefaultScrapeProtocols, LegacyValidation)`
  (scrape/scrape.go and config/config.go of v2.49.0, v2.55.0): q from 0.5 down.
- Prometheus 3.0-3.3: `acceptHeader(DefaultScrapeProtocols, UTF8Validation)`, which
  adds `;escaping=allow-utf-8` to every entry, and text 1.0.0's entry already has one
  (config.ScrapeProtocolsHeaders of v3.0.0 to v3.3.0): it is there twice.
- Prometheus 3.4 and later: the escaping only on the 1.0.0 entries (v3.4.0 to v3.14.0;
  scrape_test.go's `expectedHeader` for the default protocols and allow-utf-8).
- Prometheus 3.4 and later with `metric_name_validation_scheme: legacy`: the same with
  `escaping=underscores` (not a default, but the documented way back to legacy names).
- vmagent (VictoriaMetrics 1.79 to today): lib/promscrape/client.go.
- Prometheus 2.5-2.34: OpenMetrics 0.0.1 first (prometheus_client answers text 0.0.4).
"""

from __future__ import annotations

from typing import NamedTuple


class Scraper(NamedTuple):
    name: str
    accept: str
    content_type: str  # prometheus_client's answer to `accept`


_OM_U = "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores"
_OM_UTF8 = "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=allow-utf-8"
_TEXT = "text/plain; version=0.0.4; charset=utf-8"

VMAGENT = Scraper("vmagent", "text/plain;version=0.0.4;q=1,*/*;q=0.1", _TEXT)
PROMETHEUS_2 = Scraper(
    "prometheus-2.35", "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1", _OM_U)
PROMETHEUS_3 = Scraper(
    "prometheus-3.4", "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;"
    "escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2", _OM_UTF8)

SCRAPERS = (
    VMAGENT,
    PROMETHEUS_2,
    Scraper("prometheus-2.40.0", "application/openmetrics-text;version=1.0.0;q=0.75,"
            "application/openmetrics-text;q=0.6,text/plain;version=0.0.4;q=0.5,*/*;q=0.1", _OM_U),
    Scraper("prometheus-2.49", "application/openmetrics-text;version=1.0.0;q=0.5,"
            "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,"
            "*/*;q=0.2", _OM_U),
    Scraper("prometheus-2.5", "application/openmetrics-text; version=0.0.1,"
            "text/plain;version=0.0.4;q=0.5,*/*;q=0.1", _TEXT),
    Scraper("prometheus-3.0", "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;"
            "q=0.6,application/openmetrics-text;version=0.0.1;escaping=allow-utf-8;q=0.5,"
            "text/plain;version=1.0.0;escaping=allow-utf-8;escaping=allow-utf-8;q=0.4,"
            "text/plain;version=0.0.4;escaping=allow-utf-8;q=0.3,*/*;q=0.2", _OM_UTF8),
    PROMETHEUS_3,
    Scraper("prometheus-3.4-legacy-names", "application/openmetrics-text;version=1.0.0;"
            "escaping=underscores;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,"
            "text/plain;version=1.0.0;escaping=underscores;q=0.4,text/plain;version=0.0.4;q=0.3,"
            "*/*;q=0.2", _OM_U),
    # Asked only by a scrape config that lists PrometheusText1.0.0 first.
    Scraper("text-1.0.0", "text/plain;version=1.0.0;escaping=allow-utf-8",
            "text/plain; version=1.0.0; charset=utf-8; escaping=allow-utf-8"),
)
