"""`make demo` (scripts/demo.sh): it starts, the simulated fleet reaches VictoriaMetrics
marked as demo data, vmalert loads the whole alert pack, and Ctrl-C stops everything,
make included, with exit 0."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import select
import signal
import socket
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.helpers import REPO, eventually, free_port
from tests.rules.rulefiles import RULE_FILES, load_rules


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class _Terminal:
    """`make demo` as a user runs it: on a terminal of its own (a pty), stopped by the
    Ctrl-C byte typed there, which the terminal turns into SIGINT for its foreground
    process group."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: a new session whose controlling terminal is the pty
            os.chdir(REPO)
            # As a CI runner, nohup or a background job starts it: with SIGINT ignored,
            # which `make demo` must undo for Ctrl-C to stop it.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            os.execvpe(argv[0], argv, env)
        self.output = b""

    def read(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if select.select([self.fd], [], [], left)[0]:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # EIO: every process on the terminal has ended
                    return
                if not chunk:
                    return
                self.output += chunk

    def text(self) -> str:
        return self.output.decode(errors="replace").replace("\r\n", "\n")

    def wait(self, seconds: float) -> int | None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.read(0.2)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.read(0.5)
                return os.waitstatus_to_exitcode(status)
        return None


def test_make_demo_runs_and_ctrl_c_stops_everything_with_exit_0() -> None:
    ports = {k: free_port() for k in ("EXPORTER", "VM", "VMALERT", "ALERTMANAGER")}
    env = {**os.environ, "DEMO_SCRAPE_INTERVAL": "1s",
           **{f"DEMO_{k}_PORT": str(v) for k, v in ports.items()}}
    # The venv is the suite's own (make test made it): not rebuilt for this.
    term = _Terminal(["make", "--no-print-directory", "-o", ".venv/.installed", "demo"], env)
    work = None
    try:
        def ready() -> bool:
            if term.wait(0.2) is not None:  # reads the terminal for 0.2 s
                raise RuntimeError(f"make demo ended:\n{term.text()}")
            return "DEMO READY" in term.text()

        eventually(ready, 120, "DEMO READY", interval=0)
        text = term.text()
        assert f"http://127.0.0.1:{ports['VM']}/vmui" in text
        assert "SIMULATED" in text
        work = re.search(r"Logs and data: (\S+)", text)
        assert work and Path(work.group(1)).is_dir()

        vm = f"http://127.0.0.1:{ports['VM']}"
        res = eventually(lambda: _get(vm + "/api/v1/query?query=" + urllib.parse.quote(
            'count(hw_gpu_up{demo="true", job="gpu-exporter"})'))["data"]["result"],
            60, "demo data in VictoriaMetrics", interval=1)
        assert int(res[0]["value"][1]) >= 6  # 4 fake H100s + the AMD and Intel captures
        # GPM activity of every simulated H100 (same scrape as hw_gpu_up)
        gpm = _get(vm + "/api/v1/query?query=" + urllib.parse.quote(
            'count(hw_gpu_sm_active_ratio{demo="true"}) == '
            'count(hw_gpu_info{demo="true", hw_vendor="nvidia"})'))["data"]["result"]
        assert gpm and int(gpm[0]["value"][1]) >= 4, gpm

        groups = _get(f"http://127.0.0.1:{ports['VMALERT']}/api/v1/rules")["data"]["groups"]
        rules = sum(len(g["rules"]) for g in groups)
        assert rules == len(load_rules(RULE_FILES)), groups
    finally:
        os.write(term.fd, b"\x03")  # Ctrl-C
        rc = term.wait(60)
        if rc is None:  # the demo's own process group holds the terminal, then make's
            for group in (os.tcgetpgrp(term.fd), term.pid):
                with contextlib.suppress(OSError):
                    os.killpg(group, signal.SIGKILL)
            os.waitpid(term.pid, 0)
        os.close(term.fd)
    assert rc == 0, term.text()
    assert "demo: stopping" in term.text()
    assert "Interrupt" not in term.text() and "Error" not in term.text(), term.text()
    for name, port in ports.items():
        assert not _listening(port), f"{name} still listening after Ctrl-C"
    assert work and not Path(work.group(1)).exists()
