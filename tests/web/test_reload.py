"""The web config follows its file while serving, and SIGHUP never ends the exporter
(issue 32, "the small ones"): exporter-toolkit reads its config again for each new TLS
connection and request, and does not reload on SIGHUP."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import bcrypt

from gpu_exporter.http.webconfig import LiveWebConfig, load_web_config
from tests.drills.test_http_attacks import exporter_with
from tests.helpers import eventually
from tests.web.serve import basic

NO_DEVICES = {"LD_LIBRARY_PATH": "/nonexistent", "GPU_EXPORTER_PATH_SYSFS": "/nonexistent"}


def _users(path: Path, password: bytes, cost: int) -> None:
    hashed = bcrypt.hashpw(password, bcrypt.gensalt(rounds=cost)).decode()
    # A new file put in place, as a config manager does (a new inode, a new mtime).
    tmp = path.with_suffix(".new")
    tmp.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    os.replace(tmp, path)


def test_a_changed_file_is_served_and_a_broken_one_keeps_the_last(tmp_path: Path) -> None:
    cfg = tmp_path / "web.yml"
    _users(cfg, b"old", 4)
    with exporter_with([f"--web.config.file={cfg}"], NO_DEVICES) as exp:
        def status(password: str) -> int:
            return exp.get("/metrics", headers=basic("prometheus", password))[0]

        assert status("old") == 200 and status("new") == 401
        # SIGHUP: a line, and nothing else (was: the default action, the process ended).
        exp.proc.send_signal(signal.SIGHUP)
        eventually(lambda: "received signal SIGHUP: ignored" in exp.logs(), 10,
                   "the SIGHUP line")
        assert exp.proc.poll() is None and status("old") == 200

        _users(cfg, b"new", 5)
        eventually(lambda: status("new") == 200, 10, "the new password served")
        assert status("old") == 401
        assert "re-read" in exp.logs()

        cfg.write_text("basic_auth_users:\n  prometheus: '$2$05$garbage'\n")
        # Looked at when a request comes (as exporter-toolkit reads it per request).
        eventually(lambda: status("new") == 200
                   and "keeping the web config in effect" in exp.logs(), 10,
                   "the broken file reported")
        assert status("new") == 200  # the last good config stays in effect
        assert exp.logs().count("keeping the web config in effect") == 1


def test_the_decoy_follows_the_users_cost(tmp_path: Path) -> None:
    """Cost 31 once hung `serve` because the decoy was made at start at the users'
    highest cost; now every cost is capped at load, and the decoy is made again, off the
    event loop, when the file changes."""
    cfg = tmp_path / "web.yml"
    _users(cfg, b"pw", 4)
    errors: list[str] = []
    live = LiveWebConfig(load_web_config(str(cfg)), errors.append, check_every=0.0)
    assert live.auth is not None and live.auth.decoy_cost == 4
    checks = live.auth.checks
    written = cfg.stat().st_mtime_ns
    _users(cfg, b"pw", 6)
    os.utime(cfg, ns=(written + 10**9, written + 10**9))  # a new mtime, whatever the clock

    def reloaded() -> bool:
        live.refresh()
        return live.auth is not None and live.auth.decoy_cost == 6

    eventually(reloaded, 10, "the decoy made again at cost 6")
    assert live.auth.checks is checks  # one bcrypt thread, whatever the reloads
    assert errors == []
