"""A kubelet whose socket takes connections but never answers (a kubelet stuck, or
anything else listening there): it costs one wait for its answer, then is marked and
asked again every retry interval, not every scrape."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers import eventually, exporter, find, parse, value
from tests.processes.test_feature_states import flags, node, state

RETRY = 3.0  # --collector.retry-interval
KUBELET_WAIT = 2.0  # how long the exporter waits for the kubelet's answer
# What the processes collector itself says it took: a scrape that waited for the
# kubelet took about KUBELET_WAIT; one that did not, milliseconds.
WAITED = KUBELET_WAIT / 2


class SilentSocket:
    """A unix socket that accepts every connection, reads nothing, answers nothing."""

    def __init__(self, path: Path) -> None:
        self.connections = 0
        self._server = socket.socket(socket.AF_UNIX)
        self._server.bind(str(path))
        self._server.listen(16)
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self._held.append(conn)
            self.connections += 1

    def close(self) -> None:
        self._server.close()
        for conn in self._held:
            conn.close()


@contextmanager
def silent(path: Path) -> Iterator[SilentSocket]:
    s = SilentSocket(path)
    try:
        yield s
    finally:
        s.close()


def _seconds(text: str) -> float:
    return value(parse(text), "gpu_exporter_collector_duration_seconds",
                 collector="processes")


def test_a_silent_kubelet_costs_one_wait_per_retry_interval(tmp_path: Path) -> None:
    node(tmp_path)
    sock = tmp_path / "kubelet.sock"
    with silent(sock) as kubelet, exporter(
            [*flags(tmp_path, sock), f"--collector.retry-interval={RETRY}",
             "--scrape.timeout=5"]) as exp:
        first = exp.scrape()
        failed_at = time.monotonic()
        assert _seconds(first) >= WAITED  # the one wait
        s = parse(first)
        assert state(s, "processes.kubelet") == "unavailable"
        assert value(s, "gpu_exporter_collector_success", collector="processes") == 0
        # Everything else of the collector still reports.
        assert value(s, "process_gpu_memory_usage_bytes", process_pid="4242") == 1024 * 1024
        asked = kubelet.connections
        durations = []
        while time.monotonic() - failed_at < RETRY - 1:
            text = exp.scrape()
            durations.append(_seconds(text))
            s = parse(text)
            assert state(s, "processes.kubelet") == "unavailable"
            assert value(s, "gpu_exporter_collector_success", collector="processes") == 0
        assert len(durations) >= 3
        assert [d for d in durations if d >= WAITED] == [], durations
        assert kubelet.connections == asked, "asked again before the retry interval"
        # ... and asked again once the retry interval has passed.

        def asked_again() -> bool:
            exp.scrape()
            return kubelet.connections != asked

        eventually(asked_again, RETRY + 10, "asked again after the retry interval",
                   interval=0.2)
        assert "DEADLINE_EXCEEDED" in exp.logs()
        assert "asked again every --collector.retry-interval (3 s)" in exp.logs()
        assert find(parse(exp.scrape()), "process_gpu_memory_usage_bytes")
