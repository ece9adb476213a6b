"""`make demo` (scripts/demo.sh): it starts, the simulated fleet reaches VictoriaMetrics
marked as demo data, vmalert loads the whole alert pack, and Ctrl-C stops everything."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.helpers import REPO, free_port
from tests.rules.rulefiles import RULE_FILES, load_rules


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_demo_runs_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    ports = {k: free_port() for k in ("EXPORTER", "VM", "VMALERT", "ALERTMANAGER")}
    env = {**os.environ, "DEMO_SCRAPE_INTERVAL": "1s",
           **{f"DEMO_{k}_PORT": str(v) for k, v in ports.items()}}
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(["bash", str(REPO / "scripts" / "demo.sh")], env=env,
                                stdout=o, stderr=e, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "DEMO READY" not in err.read_text():
            assert proc.poll() is None, err.read_text()
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.2)
        text = out.read_text()
        assert f"http://127.0.0.1:{ports['VM']}/vmui" in text
        assert "SIMULATED" in text
        work = re.search(r"Logs and data: (\S+)", text)
        assert work and Path(work.group(1)).is_dir()

        vm = f"http://127.0.0.1:{ports['VM']}"
        deadline = time.monotonic() + 60
        while True:
            res = _get(vm + "/api/v1/query?query=" + urllib.parse.quote(
                'count(hw_gpu_up{demo="true", job="gpu-exporter"})'))["data"]["result"]
            if res:
                break
            assert time.monotonic() < deadline, "no demo data in VictoriaMetrics"
            time.sleep(1)
        assert int(res[0]["value"][1]) >= 6  # 4 fake H100s + the AMD and Intel captures

        groups = _get(f"http://127.0.0.1:{ports['VMALERT']}/api/v1/rules")["data"]["groups"]
        rules = sum(len(g["rules"]) for g in groups)
        assert rules == len(load_rules(RULE_FILES)), groups
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # what Ctrl-C sends to the script
        try:
            rc = proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise AssertionError(f"demo did not stop on Ctrl-C:\n{err.read_text()}") from None
    assert rc == 130, err.read_text()
    assert "demo: stopping" in err.read_text()
    for name, port in ports.items():
        assert not _listening(port), f"{name} still listening after Ctrl-C"
    assert not Path(work.group(1)).exists()
