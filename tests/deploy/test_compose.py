"""The compose stacks (no docker engine here): files parse, every mounted file exists,
every service another one talks to exists on the port it listens on, the configs load in
the real tools (promtool, vmagent, amtool), Grafana's provisioning points at the
datasource and at dashboards that exist, and the exporter's command line is real."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from tests.helpers import REPO, require_tool, run_cli

COMPOSE = REPO / "deploy" / "compose"
STACKS = ["compose.yaml", "compose.prometheus.yaml"]
OVERRIDES = ["compose.ebpf.yaml", "compose.ha.yaml"]


def load(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((COMPOSE / name).read_text())
    assert isinstance(doc, dict)
    return doc


def services(name: str) -> dict[str, dict[str, Any]]:
    """Services with `extends` resolved (same-folder files), as compose merges them."""
    out = {}
    for svc_name, svc in load(name)["services"].items():
        svc = dict(svc)
        if "extends" in svc:
            ext = svc.pop("extends")
            base = services(ext.get("file", name))[ext["service"]]
            svc = {**base, **svc}
        out[svc_name] = svc
    return out


def bind_mounts(svc: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for v in svc.get("volumes", []):
        src, dst = v.split(":")[:2]
        if src.startswith((".", "/")):
            out.append((src, dst))
    return out


def host_path(src: str) -> Path:
    return (COMPOSE / src).resolve() if src.startswith(".") else Path(src)


@pytest.mark.parametrize("stack", STACKS + OVERRIDES)
def test_relative_mounts_exist_and_images_are_pinned(stack: str) -> None:
    for name, svc in services(stack).items():
        for src, _dst in bind_mounts(svc):
            if src.startswith("."):
                assert host_path(src).exists(), f"{stack}: {name} mounts missing {src}"
        image = svc.get("image")
        if image and stack not in OVERRIDES:
            assert re.search(r":v?\d", image), f"{stack}: {name} image {image} is not pinned"
        if "build" in svc:
            ctx = (COMPOSE / svc["build"]["context"]).resolve()
            assert (ctx / svc["build"]["dockerfile"]).is_file()
            assert ctx == REPO


def listening_ports(svc: dict[str, Any]) -> set[str]:
    """Ports a service listens on: its published container ports and -httpListenAddr."""
    ports = {str(p).rsplit(":", 1)[-1] for p in svc.get("ports", [])}
    for arg in svc.get("command", []):
        m = re.match(r"-httpListenAddr=.*:(\d+)$", str(arg))
        if m:
            ports.add(m.group(1))
    return ports


@pytest.mark.parametrize("stack", STACKS)
def test_services_reach_each_other(stack: str) -> None:
    svcs = services(stack)
    text = (COMPOSE / stack).read_text()
    for path in {host_path(s) for svc in svcs.values() for s, _ in bind_mounts(svc)}:
        if path.is_file() and path.suffix in (".yml", ".yaml"):
            text += path.read_text()
    # Every http://service:port and host:port target names a service of this stack.
    refs = re.findall(r"http://([a-z0-9-]+):(\d+)", text)
    refs += re.findall(r'"([a-z][a-z0-9-]*):(\d+)"', text)
    assert refs
    for host, port in refs:
        assert host in svcs, f"{stack}: {host}:{port} is not a service"
        assert port in listening_ports(svcs[host]), f"{stack}: {host} does not listen on {port}"
    assert set(svcs) >= {"gpu-exporter", "alertmanager", "grafana"}


def test_exporter_command_line_is_real() -> None:
    svc = services("compose.yaml")["gpu-exporter"]
    mounts = dict((dst, src) for src, dst in bind_mounts(svc))
    assert mounts["/host/sys"] == "/sys" and mounts["/host/proc"] == "/proc"
    args = [a.replace("/host/sys", "/sys").replace("/host/proc", "/proc")
            for a in svc["command"]]
    env = {k: re.sub(r"\$\{HOST_NAME:-([^}]*)\}", r"\1", v)
           for k, v in svc["environment"].items()}
    res = run_cli(["dump", *args], env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert 'host_name="gpu-host"' in res.stdout
    ebpf = services("compose.ebpf.yaml")["gpu-exporter"]
    assert set(ebpf["cap_add"]) == {"BPF", "PERFMON", "SYS_PTRACE", "DAC_READ_SEARCH"}
    assert ebpf["cap_drop"] == ["ALL"] and ebpf["pid"] == "host"
    assert ebpf["stop_grace_period"] == "120s"  # time to detach the probes


def test_prometheus_config_loads_with_the_alert_pack(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    svc = services("compose.prometheus.yaml")["prometheus"]
    # Lay the container's /etc/prometheus out here, from the service's own mounts.
    etc = tmp_path / "etc-prometheus"
    for src, dst in bind_mounts(svc):
        if dst.startswith("/etc/prometheus/"):
            target = etc / dst.removeprefix("/etc/prometheus/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(host_path(src))
    res = subprocess.run([promtool, "check", "config", str(etc / "prometheus.yml")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    # The rule files were found and checked, not skipped by an empty glob.
    assert "SUCCESS" in res.stdout and "rules found" in res.stdout, res.stdout


def test_vmagent_scrape_config_loads() -> None:
    vmagent = require_tool("vmagent")
    svc = services("compose.yaml")["vmagent"]
    mounts = {dst: host_path(src) for src, dst in bind_mounts(svc)}
    flag = next(a for a in svc["command"] if a.startswith("-promscrape.config="))
    config = mounts[flag.split("=", 1)[1]]
    res = subprocess.run([vmagent, "-dryRun", f"-promscrape.config={config}",
                          "-loggerLevel=ERROR"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_alertmanager_config_loads() -> None:
    amtool = require_tool("amtool")
    res = subprocess.run([amtool, "check-config", str(COMPOSE / "alertmanager.yml")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_vmalert_loads_the_mounted_rules() -> None:
    vmalert = require_tool("vmalert")
    svc = services("compose.yaml")["vmalert"]
    mounts = {dst: host_path(src) for src, dst in bind_mounts(svc)}
    rule_flag = next(a for a in svc["command"] if a.startswith("-rule="))
    pattern = rule_flag.split("=", 1)[1]
    folder, glob = pattern.rsplit("/", 1)
    files = sorted(mounts[folder].glob(glob))
    assert files
    res = subprocess.run([vmalert, "-dryRun", *[f"-rule={f}" for f in files]],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("stack", STACKS)
def test_grafana_provisioning(stack: str) -> None:
    svcs = services(stack)
    grafana = svcs["grafana"]
    mounts = {dst: host_path(src) for src, dst in bind_mounts(grafana)}
    prov = mounts["/etc/grafana/provisioning"]
    sources = [yaml.safe_load(p.read_text()) for p in (prov / "datasources").glob("*.yml")]
    assert sources
    defaults = []
    for doc in sources:
        assert doc["apiVersion"] == 1
        for ds in doc["datasources"]:
            assert ds["type"] == "prometheus" and ds["access"] == "proxy"
            url = urlparse(ds["url"])
            assert url.hostname in svcs, ds["url"]
            if ds.get("isDefault"):
                defaults.append(ds)
    assert len(defaults) == 1, "the dashboards use the default Prometheus datasource"

    providers = [yaml.safe_load(p.read_text()) for p in (prov / "dashboards").glob("*.yml")]
    assert providers
    for doc in providers:
        assert doc["apiVersion"] == 1
        for provider in doc["providers"]:
            assert provider["type"] == "file"
            folder = mounts[provider["options"]["path"]]
            dashboards = sorted(folder.glob("*.json"))
            assert len(dashboards) >= 4, folder
            for path in dashboards:
                dash = json.loads(path.read_text())
                assert dash["uid"] and dash["title"], path
                # Provisioned dashboards do not get __inputs substituted: they must pick
                # their datasource from a variable of type "datasource".
                assert "__inputs" not in dash, path
                variables = {v["name"]: v for v in dash["templating"]["list"]}
                ds_var = variables["datasource"]
                assert ds_var["type"] == "datasource" and ds_var["query"] == "prometheus"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    folder, name = home.rsplit("/", 1)
    assert (mounts[folder] / name).is_file()


def test_compose_files_name_no_unknown_top_level_keys() -> None:
    for stack in STACKS + OVERRIDES:
        assert set(load(stack)) <= {"name", "services", "volumes", "networks", "configs",
                                    "secrets"}, stack
        for svc in load(stack)["services"].values():
            for key in ("volumes",):
                for v in svc.get(key, []):
                    src = v.split(":")[0]
                    if not src.startswith((".", "/")):
                        assert src in load(stack).get("volumes", {}), (stack, v)


def test_vmagent_uses_the_stream_aggregation_of_deploy_vmagent() -> None:
    svc = services("compose.yaml")["vmagent"]
    mounts = {dst: host_path(src) for src, dst in bind_mounts(svc)}
    flag = next(a for a in svc["command"] if a.startswith("-remoteWrite.streamAggr.config="))
    config = mounts[flag.split("=", 1)[1]]
    assert config.parent == REPO / "deploy" / "vmagent"
    rules = yaml.safe_load(config.read_text())
    assert isinstance(rules, list) and rules
    for rule in rules:
        assert rule["match"] and rule["outputs"] and rule["interval"], rule
    # keep_metric_names and pass-through of unmatched series need vmagent 1.100 or newer.
    version = re.search(r":v1\.(\d+)\.", svc["image"])
    assert version and int(version.group(1)) >= 100, svc["image"]
    images = {s.get("image", "").split(":")[-1] for name, s in services("compose.yaml").items()
              if name in ("vmagent", "victoriametrics", "vmalert")}
    assert len(images) == 1, f"one VictoriaMetrics release for the stack: {images}"
