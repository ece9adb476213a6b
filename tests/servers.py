"""Real monitoring servers for tests: Prometheus, VictoriaMetrics, vmagent, vmalert and
Alertmanager from the Debian packages, each on a free loopback port with its own temporary
data folder, started and stopped by a context manager.

    with prometheus(scrape=[target], rule_files=RULES) as prom:
        prom.wait_for('up{job="gpu-exporter"} == 1')
        prom.query("sum(hw_gpu_power_draw_watts)")

Every server object has `.url`, `.logs()`, and (for the query servers) `.query()`,
`.query_range()` and `.wait_for()`; all speak the Prometheus HTTP API.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import eventually, free_port, require_tool, stop_process, wait_started

START_TIMEOUT = 60.0


class QueryError(AssertionError):
    """The server answered a query with an error (bad syntax, unknown function...)."""


class Server:
    def __init__(self, name: str, proc: subprocess.Popen[bytes], port: int, log: Path,
                 ready_path: str) -> None:
        self.name = name
        self.proc = proc
        self.port = port
        self.log = log
        self.ready_path = ready_path
        self.url = f"http://127.0.0.1:{port}"

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def http(self, path: str, data: Mapping[str, str] | None = None,
             timeout: float = 30) -> tuple[int, bytes]:
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        req = urllib.request.Request(self.url + path, data=body)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def get_json(self, path: str, data: Mapping[str, str] | None = None) -> Any:
        status, body = self.http(path, data)
        assert status == 200, f"{self.name} {path}: {status} {body[:500]!r}"
        return json.loads(body)

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        wait_started(self.proc, lambda: self.http(self.ready_path, timeout=2)[0] == 200,
                     lambda: self.logs()[-4000:], self.name, timeout, interval=0.1)

    def stop(self) -> None:
        stop_process(self.proc)


class QueryServer(Server):
    """Prometheus or VictoriaMetrics: the Prometheus query API."""

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query; raises QueryError when the server rejects the expression."""
        data = {"query": expr}
        if at is not None:
            data["time"] = f"{at:.3f}"
        status, body = self.http("/api/v1/query", data)
        if status != 200:
            raise QueryError(f"{self.name} rejected {expr!r}: {status} {body[:500]!r}")
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise QueryError(f"{self.name} rejected {expr!r}: {doc}")
        result = doc["data"]["result"]
        if doc["data"]["resultType"] == "scalar":
            return [{"metric": {}, "value": result}]
        return list(result)

    def query_range(self, expr: str, start: float, end: float,
                    step: float) -> list[dict[str, Any]]:
        data = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": str(step)}
        status, body = self.http("/api/v1/query_range", data)
        if status != 200:
            raise QueryError(f"{self.name} rejected {expr!r}: {status} {body[:500]!r}")
        return list(json.loads(body)["data"]["result"])

    def wait_for(self, expr: str, timeout: float = 60) -> list[dict[str, Any]]:
        """Poll until the expression returns at least one series."""
        try:
            return eventually(lambda: self.query(expr), timeout, interval=0.5)
        except AssertionError:
            raise AssertionError(f"{self.name}: {expr!r} returned nothing for {timeout}s\n"
                                 f"{self.logs()[-3000:]}") from None


def _start(name: str, argv: Sequence[str], workdir: Path, port: int, ready_path: str,
           cls: type[Server] = Server) -> Server:
    log = workdir / f"{name}.log"
    with open(log, "wb") as logf:
        proc = subprocess.Popen(list(argv), stdout=logf, stderr=subprocess.STDOUT,
                                cwd=workdir, env={**os.environ, "TZ": "UTC"})
    server = cls(name, proc, port, log, ready_path)
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


def scrape_config(job: str, targets: Sequence[str], interval: str = "1s",
                  labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One scrape job, the same form for Prometheus and vmagent."""
    static: dict[str, Any] = {"targets": list(targets)}
    if labels:
        static["labels"] = dict(labels)
    return {"job_name": job, "scrape_interval": interval, "scrape_timeout": interval,
            "static_configs": [static]}


@contextmanager
def _workdir(name: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
        yield Path(tmp)


@contextmanager
def prometheus(scrape: Sequence[Mapping[str, Any]] = (), rule_files: Sequence[Path] = (),
               evaluation_interval: str = "1s",
               alertmanager_url: str | None = None) -> Iterator[QueryServer]:
    """A real Prometheus that scrapes `scrape` jobs and evaluates `rule_files`."""
    binary = require_tool("prometheus")
    with _workdir("prometheus") as tmp:
        port = free_port()
        config: dict[str, Any] = {
            "global": {"scrape_interval": "1s", "evaluation_interval": evaluation_interval},
            "scrape_configs": [dict(s) for s in scrape],
            "rule_files": [str(p) for p in rule_files],
        }
        if alertmanager_url:
            host = urllib.parse.urlparse(alertmanager_url).netloc
            config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [host]}]}]}
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        server = _start("prometheus", [
            binary, f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=1d", "--log.level=warn",
        ], tmp, port, "/-/ready", QueryServer)
        try:
            assert isinstance(server, QueryServer)
            yield server
        finally:
            server.stop()


@contextmanager
def victoria_metrics(scrape: Sequence[Mapping[str, Any]] = (),
                     extra_args: Sequence[str] = ()) -> Iterator[QueryServer]:
    """A real single-node VictoriaMetrics; it scrapes `scrape` jobs itself if given.
    The query latency offset is 1s (default 30s) so that fresh samples are queryable."""
    binary = require_tool("victoria-metrics")
    with _workdir("victoria-metrics") as tmp:
        port = free_port()
        args = [binary, f"-storageDataPath={tmp / 'data'}", f"-httpListenAddr=127.0.0.1:{port}",
                "-retentionPeriod=1d", "-search.latencyOffset=1s", "-search.disableCache",
                "-loggerLevel=WARN", *extra_args]
        if scrape:
            (tmp / "scrape.yml").write_text(
                yaml.safe_dump({"scrape_configs": [dict(s) for s in scrape]}))
            args.append(f"-promscrape.config={tmp / 'scrape.yml'}")
        server = _start("victoria-metrics", args, tmp, port, "/health", QueryServer)
        try:
            assert isinstance(server, QueryServer)
            yield server
        finally:
            server.stop()


@contextmanager
def vmagent(scrape: Sequence[Mapping[str, Any]], remote_write_url: str,
            extra_args: Sequence[str] = (), launcher: Sequence[str] = ()) -> Iterator[Server]:
    """A real vmagent scraping `scrape` jobs and remote-writing to `remote_write_url`
    (e.g. `vm.url + "/api/v1/write"`). `launcher`, if given, is a wrapper script that
    receives the vmagent flags and execs vmagent (e.g. deploy/vmagent/run-vmagent.sh)."""
    binary = require_tool("vmagent")
    with _workdir("vmagent") as tmp:
        port = free_port()
        (tmp / "scrape.yml").write_text(
            yaml.safe_dump({"scrape_configs": [dict(s) for s in scrape]}))
        server = _start("vmagent", [
            *(launcher or [binary]), f"-promscrape.config={tmp / 'scrape.yml'}",
            f"-remoteWrite.url={remote_write_url}", f"-remoteWrite.tmpDataPath={tmp / 'buf'}",
            "-remoteWrite.flushInterval=1s", f"-httpListenAddr=127.0.0.1:{port}",
            "-loggerLevel=WARN", *extra_args,
        ], tmp, port, "/health")
        try:
            yield server
        finally:
            server.stop()


@contextmanager
def alertmanager() -> Iterator[Server]:
    """A real Alertmanager (no receivers configured beyond a null one): the notifier
    vmalert requires, and the place to read fired alerts from (`/api/v2/alerts`)."""
    binary = require_tool("prometheus-alertmanager")
    with _workdir("alertmanager") as tmp:
        port = free_port()
        cluster_port = free_port()
        (tmp / "alertmanager.yml").write_text(yaml.safe_dump({
            "route": {"receiver": "null", "group_wait": "1s"},
            "receivers": [{"name": "null"}],
        }))
        server = _start("alertmanager", [
            binary, f"--config.file={tmp / 'alertmanager.yml'}",
            f"--storage.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
            f"--cluster.listen-address=127.0.0.1:{cluster_port}", "--log.level=warn",
        ], tmp, port, "/-/ready")
        try:
            yield server
        finally:
            server.stop()


@contextmanager
def vmalert(rule_files: Sequence[Path], datasource_url: str, notifier_url: str,
            remote_write_url: str | None = None, evaluation_interval: str = "1s",
            extra_args: Sequence[str] = ()) -> Iterator[Server]:
    """A real vmalert evaluating `rule_files` against `datasource_url`; recording-rule
    results go to `remote_write_url` (usually the same VictoriaMetrics)."""
    binary = require_tool("vmalert")
    with _workdir("vmalert") as tmp:
        port = free_port()
        args = [binary, *(f"-rule={p}" for p in rule_files),
                f"-datasource.url={datasource_url}", f"-notifier.url={notifier_url}",
                f"-evaluationInterval={evaluation_interval}",
                f"-httpListenAddr=127.0.0.1:{port}", "-loggerLevel=WARN", *extra_args]
        if remote_write_url:
            args += [f"-remoteWrite.url={remote_write_url}", "-remoteWrite.flushInterval=1s"]
        server = _start("vmalert", args, tmp, port, "/health")
        try:
            yield server
        finally:
            server.stop()

