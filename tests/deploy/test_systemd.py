"""The systemd unit and its drop-ins: systemd's own verifier and security analysis (offline,
no systemd running here), and the hardening the collectors need and no more."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from importlib.metadata import metadata
from pathlib import Path

from tests.helpers import BIN, REPO, require_tool

UNIT_DIR = REPO / "deploy" / "systemd"
UNIT = UNIT_DIR / "gpu-exporter.service"
DROPINS = UNIT_DIR / "gpu-exporter.service.d"
# systemd-analyze's exposure scale: 0 (locked down) .. 10 (unprotected); "OK" is below 4.
MAX_EXPOSURE = 3.5
EBPF_CAPS = {"CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"}


def _service(*files: Path) -> dict[str, list[str]]:
    """[Service] assignments in order, drop-ins after the unit, as systemd merges them."""
    out: dict[str, list[str]] = {}
    for f in files:
        parser = configparser.RawConfigParser(strict=False, interpolation=None,
                                              dict_type=_MultiDict)  # type: ignore[arg-type]
        parser.optionxform = str  # type: ignore[assignment, method-assign]
        parser.read(f)
        for key, value in parser.items("Service"):
            for v in value.split("\n"):
                out.setdefault(key, []).append(v.strip())
    return out


class _MultiDict(dict):  # type: ignore[type-arg]
    # Repeated keys (LoadCredential=, SystemCallFilter=) are all kept, joined by newlines.
    def __setitem__(self, key: str, value: object) -> None:
        if isinstance(value, list) and key in self:
            self[key].extend(value)
        else:
            super().__setitem__(key, value)


def _root_with(tmp: Path, *dropins: str) -> Path:
    """A file-system root holding the unit (its ExecStart pointed at this checkout's
    exporter so the verifier finds it) and the named drop-ins."""
    sysdir = tmp / "etc" / "systemd" / "system"
    (sysdir / "gpu-exporter.service.d").mkdir(parents=True)
    text = UNIT.read_text().replace("/opt/gpu-exporter/bin/gpu-exporter",
                                    str(BIN / "gpu-exporter"))
    (sysdir / "gpu-exporter.service").write_text(text)
    for d in dropins:
        shutil.copy(DROPINS / d, sysdir / "gpu-exporter.service.d" / d)
    return tmp


def _exposure(root: Path) -> float:
    analyze = require_tool("systemd-analyze")
    res = subprocess.run([analyze, f"--root={root}", "security", "--offline=yes",
                          "--no-pager", "gpu-exporter.service"],
                         capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for gpu-exporter\.service: ([0-9.]+)", res.stdout)
    assert m, res.stdout + res.stderr
    return float(m.group(1))


def test_unit_verifies_clean(tmp_path: Path) -> None:
    analyze = require_tool("systemd-analyze")
    root = _root_with(tmp_path, "ebpf.conf", "tls.conf", "process-fdinfo.conf")
    unit = root / "etc/systemd/system/gpu-exporter.service"
    res = subprocess.run([analyze, "verify", "--man=no", str(unit)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and not res.stderr.strip(), res.stdout + res.stderr


def test_verifier_catches_a_broken_unit(tmp_path: Path) -> None:
    analyze = require_tool("systemd-analyze")
    bad = tmp_path / "broken.service"
    bad.write_text("[Service]\nExecStart=relative/path\nProtectSystem=sometimes\n")
    res = subprocess.run([analyze, "verify", "--man=no", str(bad)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 or res.stderr.strip()


def test_security_exposure_is_low(tmp_path: Path) -> None:
    base = _exposure(_root_with(tmp_path / "base"))
    ebpf = _exposure(_root_with(tmp_path / "ebpf", "ebpf.conf"))
    fdinfo = _exposure(_root_with(tmp_path / "fdinfo", "process-fdinfo.conf"))
    print(f"systemd-analyze security exposure: base {base}, with eBPF drop-in {ebpf}, "
          f"with process-fdinfo drop-in {fdinfo}")
    assert base <= MAX_EXPOSURE
    assert ebpf <= MAX_EXPOSURE
    assert base <= fdinfo <= ebpf
    # The drop-in really widens what the base forbids: the analysis sees it.
    assert ebpf >= base


def test_base_unit_hardening() -> None:
    svc = _service(UNIT)
    assert svc["NoNewPrivileges"] == ["yes"]
    assert svc["ProtectSystem"] == ["strict"]
    assert svc["CapabilityBoundingSet"] == [""], "NVML and sysfs need no capability"
    assert svc["AmbientCapabilities"] == [""]
    assert svc["DynamicUser"] == ["yes"]
    assert "PrivateDevices" not in svc, "it would hide /dev/nvidia* from NVML"
    assert svc["RestartPreventExitStatus"] == ["2"]
    assert svc["ExecStart"][0].split()[0] == "/opt/gpu-exporter/bin/gpu-exporter"


def test_ebpf_dropin_grants_exactly_the_ebpf_capabilities() -> None:
    svc = _service(UNIT, DROPINS / "ebpf.conf")
    assert set(svc["CapabilityBoundingSet"][-1].split()) == EBPF_CAPS
    assert set(svc["AmbientCapabilities"][-1].split()) == EBPF_CAPS
    assert "CAP_SYS_ADMIN" not in " ".join(svc["CapabilityBoundingSet"])
    assert "GPU_EXPORTER_COLLECTOR_EBPF=true" in svc["Environment"]
    assert svc["NoNewPrivileges"] == ["yes"], "ambient capabilities work without it"
    assert svc["TimeoutStopSec"] == ["120s"]  # time to detach the probes at stop


def test_process_fdinfo_dropin_grants_only_the_fdinfo_capabilities() -> None:
    svc = _service(UNIT, DROPINS / "process-fdinfo.conf")
    fdinfo = {"CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"}
    assert set(svc["CapabilityBoundingSet"][-1].split()) == fdinfo
    assert set(svc["AmbientCapabilities"][-1].split()) == fdinfo
    assert fdinfo < EBPF_CAPS
    assert svc["NoNewPrivileges"] == ["yes"]


def test_tls_dropin_loads_the_credentials_it_names() -> None:
    svc = _service(UNIT, DROPINS / "tls.conf")
    creds = dict(c.split(":", 1) for c in svc["LoadCredential"])
    assert set(creds) == {"web.yml", "tls.crt", "tls.key"}
    assert "GPU_EXPORTER_WEB_CONFIG_FILE=%d/web.yml" in svc["Environment"]


def test_documentation_is_the_url_pip_install_records() -> None:
    # not a file in a checkout: `pip install` creates none; the package's metadata holds
    # its Documentation URL wherever it is installed
    docs = [line.split("=", 1)[1] for line in UNIT.read_text().splitlines()
            if line.startswith("Documentation=")]
    urls = dict(u.split(", ", 1) for u in metadata("gpu-exporter").get_all("Project-URL"))
    assert docs == [urls["Documentation"]] and docs[0].startswith("https://"), docs
