"""Shared test helpers: run the real exporter, scrape it, lint with promtool."""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from prometheus_client.parser import text_string_to_metric_families

T = TypeVar("T")
REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
EXPORTER = str(BIN / "gpu-exporter")


def require_tool(name: str) -> str:
    """Path of a tool CI installs; a missing tool is a failure, never a skip."""
    path = shutil.which(name)
    assert path, f"{name} is not installed: run `make test` (scripts/install-system-deps.sh)"
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_cli(
    args: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 60,
    prefix: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [*prefix, EXPORTER, *args], env=full_env, capture_output=True, text=True,
        timeout=timeout,
    )


@dataclass(frozen=True)
class Series:
    name: str
    labels: dict[str, str]
    value: float


def parse(text: str) -> list[Series]:
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.append(Series(s.name, dict(s.labels), s.value))
    return out


def find(series: Sequence[Series], name: str, **labels: str) -> list[Series]:
    return [
        s for s in series
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def value(series: Sequence[Series], name: str, **labels: str) -> float:
    hits = find(series, name, **labels)
    assert len(hits) == 1, f"expected one {name}{labels}, got {hits}"
    return hits[0].value


def promtool_check_metrics(text: str) -> None:
    promtool = require_tool("promtool")
    res = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, f"promtool check metrics failed:\n{res.stdout}{res.stderr}"


class Exporter:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc = proc
        self.port = port
        self.log = log
        self.url = f"http://127.0.0.1:{port}"

    def get(self, path: str = "/metrics", timeout: float = 30,
            headers: Mapping[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(self.url + path, headers=dict(headers or {}))
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def scrape(self, timeout: float = 30) -> str:
        status, _, body = self.get("/metrics", timeout)
        assert status == 200, f"scrape answered {status}: {body[:500]!r}"
        return body.decode()

    def logs(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def exporter(
    args: Sequence[str] = (), env: Mapping[str, str] | None = None, start_timeout: float = 30,
    prefix: Sequence[str] = (),
) -> Iterator[Exporter]:
    """Start the real exporter as a process on a free loopback port (`prefix`: a program
    that runs it, e.g. `setarch linux32`)."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "exporter.log"
        with open(log, "wb") as logf:
            proc = subprocess.Popen(
                [*prefix, EXPORTER, f"--web.listen-address=127.0.0.1:{port}", *args],
                env={**os.environ, **(env or {})}, stdout=logf, stderr=subprocess.STDOUT,
            )
        exp = Exporter(proc, port, log)
        try:
            wait_started(proc, lambda: exp.get("/healthz", timeout=2)[0] == 200,
                         exp.logs, "exporter", start_timeout)
            yield exp
        finally:
            stop_process(proc)


def eventually(check: Callable[[], T], timeout: float = 30, what: str = "", *,
               interval: float = 0.05,
               retry_on: tuple[type[BaseException], ...] = (AssertionError,),
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> T:
    """The suite's one way to wait for a condition: calls `check` until it returns a true
    value, and returns that value. A false value, or an exception of `retry_on`
    (AssertionError: `check` may assert), means not yet; past `timeout` seconds the test
    fails with `what` and the last answer. Any other exception ends the wait at once.
    (`clock` and `sleep` are injected by its own tests.)"""
    deadline = clock() + timeout
    while True:
        try:
            result = check()
            if result:
                return result
            last = f"last returned {result!r}"
        except retry_on as exc:
            last = f"last raised {type(exc).__name__}: {exc}"
        if clock() >= deadline:
            raise AssertionError(f"{what or getattr(check, '__name__', check)}: not so "
                                 f"after {timeout} s; {last}")
        sleep(interval)


def wait_started(proc: subprocess.Popen[bytes], ready: Callable[[], bool],
                 logs: Callable[[], str], name: str, timeout: float,
                 interval: float = 0.05) -> None:
    """Poll `ready` until it is true; fail with the log if `proc` exits or `timeout` passes.
    `ready` raising OSError or HTTPException counts as not yet: the port may not be bound."""

    class Exited(Exception):
        pass  # not OSError: ends the wait at once

    def up() -> bool:
        if proc.poll() is not None:
            raise Exited(f"{name} exited {proc.returncode}:\n{logs()}")
        return ready()

    try:
        eventually(up, timeout, f"{name} started", interval=interval,
                   retry_on=(OSError, http.client.HTTPException))
    except Exited as exc:
        raise AssertionError(str(exc)) from None
    except AssertionError:
        raise AssertionError(f"{name} did not start:\n{logs()}") from None


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it is still there after 15 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def check_golden(path: Path, got: str, what: str) -> None:
    """`got` must equal the golden file at `path`, byte for byte; `UPDATE_GOLDEN=1`
    writes it instead (review the diff). `what` names `got` in the failure."""
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got)
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1 to create it"
    want = path.read_text()
    if got != want:
        import difflib

        diff = "".join(difflib.unified_diff(
            want.splitlines(True), got.splitlines(True), str(path), what, n=1))
        raise AssertionError(f"{what} differs from {path.name} "
                             f"(UPDATE_GOLDEN=1 to accept):\n{diff[:6000]}")


@contextmanager
def world_readable_dir(prefix: str) -> Iterator[Path]:
    """A folder under /tmp that any user may walk: pytest's tmp_path is private to root,
    and `run_as_nobody` needs a path it can read."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(root, 0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root)


def run_as_nobody(args: Sequence[str], timeout: float = 60
                  ) -> subprocess.CompletedProcess[str]:
    """The exporter run as the unprivileged user `nobody` (util-linux setpriv): root reads
    any file, an exporter without privileges does not."""
    setpriv = require_tool("setpriv")
    return subprocess.run(
        [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", EXPORTER, *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, "HOME": "/tmp"})
