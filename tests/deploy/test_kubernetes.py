"""Kubernetes manifests: every object validated against the Kubernetes schemas
(kubernetes-validate), the operators' custom resources checked structurally, the
kustomizations rendered, the wiring between objects checked, and the rule objects proven
generated from alerts/ and loadable by promtool."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpu_exporter.commands.cli import main as cli_main
from tests.deploy.kustomize import load_docs, referenced_files, render
from tests.helpers import REPO, require_tool, run_cli

K8S = REPO / "deploy" / "kubernetes"
KUSTOMIZATIONS = ["base", "prometheus-operator", "victoriametrics-operator", "overlays/ebpf",
                  "overlays/tls", "overlays/process-fdinfo", "scrapers/vmagent-sharded",
                  "scrapers/vmagent-ha"]
# The oldest Kubernetes release still maintained when this was written, and the newest
# the schemas know.
K8S_VERSIONS = ["1.31.0", kubernetes_validate.latest_version()]
CRDS = {
    "ServiceMonitor": "monitoring.coreos.com/v1",
    "PrometheusRule": "monitoring.coreos.com/v1",
    "VMServiceScrape": "operator.victoriametrics.com/v1beta1",
    "VMRule": "operator.victoriametrics.com/v1beta1",
}
EBPF_CAPS = {"BPF", "PERFMON", "SYS_PTRACE", "DAC_READ_SEARCH"}


def manifest_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml")


def rendered(name: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in render(K8S / name)}


def daemonset(name: str) -> dict[str, Any]:
    return rendered(name)[("DaemonSet", "gpu-exporter")]


def test_every_manifest_is_in_a_kustomization() -> None:
    referenced: set[Path] = set()
    for k in KUSTOMIZATIONS:
        referenced |= {p for p in referenced_files(K8S / k) if p.is_file()}
    orphans = [p for p in manifest_files() if p.resolve() not in referenced]
    assert not orphans, orphans


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_core_objects_validate_against_kubernetes_schemas(version: str) -> None:
    checked = 0
    for k in KUSTOMIZATIONS:
        for obj in render(K8S / k):
            if obj["kind"] in CRDS:
                continue
            # strict: a misspelt or misplaced field is an error, not silently dropped.
            kubernetes_validate.validate(obj, version, strict=True)
            checked += 1
    assert checked >= 8


def test_validator_rejects_a_broken_daemonset() -> None:
    broken = daemonset("base")
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsUsr"] = 0
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[-1], strict=True)


def test_custom_resources_are_well_formed() -> None:
    seen = set()
    for path in manifest_files():
        for obj in load_docs(path):
            kind = obj["kind"]
            if kind not in CRDS:
                continue
            seen.add(kind)
            assert obj["apiVersion"] == CRDS[kind], path
            assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", obj["metadata"]["name"])
            spec = obj["spec"]
            if kind in ("ServiceMonitor", "VMServiceScrape"):
                assert set(spec) <= {"selector", "namespaceSelector", "endpoints", "jobLabel"}
                relabel_key = "relabelings" if kind == "ServiceMonitor" else "relabelConfigs"
                for ep in spec["endpoints"]:
                    assert set(ep) <= {"port", "path", "interval", "scrapeTimeout",
                                       relabel_key}, ep
                    assert _seconds(ep["scrapeTimeout"]) < _seconds(ep["interval"])
            else:
                assert set(spec) == {"groups"}
                names = [g["name"] for g in spec["groups"]]
                assert len(names) == len(set(names)), f"duplicate group in {path}"
                for group in spec["groups"]:
                    for rule in group["rules"]:
                        assert ("alert" in rule) != ("record" in rule), rule
                        assert isinstance(rule["expr"], str) and rule["expr"].strip()
    assert seen == set(CRDS)


def _seconds(duration: str) -> float:
    m = re.fullmatch(r"(\d+)(s|m)", duration)
    assert m, duration
    return int(m.group(1)) * (60 if m.group(2) == "m" else 1)


def test_scrape_objects_select_the_service() -> None:
    base = rendered("base")
    service = base[("Service", "gpu-exporter")]
    pod = daemonset("base")["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    port_names = {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= port_names
    for operator, kind in (("prometheus-operator", "ServiceMonitor"),
                           ("victoriametrics-operator", "VMServiceScrape")):
        scrape = rendered(operator)[(kind, "gpu-exporter")]
        spec = scrape["spec"]
        assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        assert spec["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
        assert {e["port"] for e in spec["endpoints"]} <= {p["name"] for p in
                                                          service["spec"]["ports"]}
    # The job label is the Service's name: the alert pack's default exporter selector.
    assert service["metadata"]["name"] == "gpu-exporter"


def test_base_daemonset_is_least_privilege() -> None:
    ds = daemonset("base")
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    sc = c["securityContext"]
    assert not pod.get("hostPID") and not pod.get("hostIPC")
    # The node's network namespace, for the host collector's interface counters.
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["automountServiceAccountToken"] is False
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for host, inside in (("/sys", "/host/sys"), ("/proc", "/host/proc"),
                         ("/var/lib/kubelet/pod-resources", "/var/lib/kubelet/pod-resources"),
                         ("/var/log/pods", "/var/log/pods")):
        assert mounts[inside]["readOnly"] is True, inside
        assert volumes[mounts[inside]["name"]]["hostPath"]["path"] == host
    assert f"--path.sysfs={'/host/sys'}" in c["args"]
    assert f"--path.procfs={'/host/proc'}" in c["args"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(c["resources"][kind])
    # Scheduled on GPU nodes only, tolerating their taints.
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = {e["key"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]}
    assert "nvidia.com/gpu.present" in keys
    assert {"nvidia.com/gpu", "amd.com/gpu"} <= {t["key"] for t in pod["tolerations"]}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"


EBPF_STOP_SECONDS = 120


def test_ebpf_overlay_adds_exactly_what_ebpf_needs() -> None:
    base, ebpf = daemonset("base"), daemonset("overlays/ebpf")
    pod = ebpf["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert pod["hostPID"] is True
    assert set(c["securityContext"]["capabilities"]["add"]) == EBPF_CAPS
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert {"name": "GPU_EXPORTER_COLLECTOR_EBPF", "value": "true"} in c["env"]
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/sys/kernel/tracing", "/lib/modules", "/usr/src"} <= mounts
    # Detaching probes at SIGTERM: Kubernetes' default 30 s is too short on kernels
    # before 6.6 (about 0.1 s per probe).
    assert pod["terminationGracePeriodSeconds"] == EBPF_STOP_SECONDS
    # Everything else is the base's.
    assert ebpf["metadata"]["namespace"] == base["metadata"]["namespace"] == "gpu-exporter"
    assert pod["affinity"] == base["spec"]["template"]["spec"]["affinity"]


def test_process_fdinfo_overlay_adds_only_the_fdinfo_capabilities() -> None:
    base, fdinfo = daemonset("base"), daemonset("overlays/process-fdinfo")
    pod = fdinfo["spec"]["template"]["spec"]
    sc = pod["containers"][0]["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE", "DAC_READ_SEARCH"]}
    assert not pod.get("hostPID")  # the host's /proc is mounted; its PIDs are not needed
    # The fdinfo capabilities are a subset of what the eBPF overlay grants.
    assert set(sc["capabilities"]["add"]) < EBPF_CAPS
    # Everything else is the base's.
    base_pod = base["spec"]["template"]["spec"]
    base_sc = base_pod["containers"][0]["securityContext"]
    assert {k: v for k, v in sc.items() if k != "capabilities"} == \
        {k: v for k, v in base_sc.items() if k != "capabilities"}
    assert {k: v for k, v in pod.items() if k != "containers"} == \
        {k: v for k, v in base_pod.items() if k != "containers"}


def _known_env_names() -> set[str]:
    names: set[str] = set()
    for p in cli_main.params:
        envvar = p.envvar
        if isinstance(envvar, str):
            names.add(envvar)
        elif envvar:
            names.update(envvar)
    return names


def test_manifests_use_only_real_flags_and_variables() -> None:
    known_env = _known_env_names()
    for name in ("base", "overlays/ebpf"):
        c = daemonset(name)["spec"]["template"]["spec"]["containers"][0]
        for env in c["env"]:
            if env["name"].startswith("GPU_EXPORTER_"):
                assert env["name"] in known_env, env
    # The base container's exact arguments and environment start the real exporter
    # (doctor: start every collector once, print, exit), with the host paths where the
    # container mounts them.
    c = daemonset("base")["spec"]["template"]["spec"]["containers"][0]
    args = [a.replace("/host/sys", "/sys").replace("/host/proc", "/proc") for a in c["args"]]
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    env = {k: v.replace("$(NODE_NAME)", "node-a") for k, v in env.items()}
    res = run_cli(["doctor", *args], env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    dump = run_cli(["dump", *args], env=env, timeout=120)
    assert dump.returncode == 0, dump.stderr
    assert 'host_name="node-a"' in dump.stdout and 'k8s_node_name="node-a"' in dump.stdout


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_k8s_rules",
                                                  REPO / "scripts" / "gen-k8s-rules.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rule_objects_are_generated_from_alerts() -> None:
    gen = _generator()
    assert gen.rule_files(), "alerts/ has no rule files"
    for path, (api_version, kind) in gen.OUTPUTS.items():
        assert path.read_text() == gen.render(api_version, kind), (
            f"{path.relative_to(REPO)} is stale: run python3 scripts/gen-k8s-rules.py")
    res = subprocess.run([sys.executable, str(REPO / "scripts/gen-k8s-rules.py"), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def test_generated_rules_load_in_promtool(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    gen = _generator()
    sources = {f"alerts/{p.name}": p for p in gen.rule_files()}
    for path in gen.OUTPUTS:
        for obj in load_docs(path):
            # Each object carries exactly its source file's groups.
            src = sources[obj["metadata"]["annotations"]["gpu-exporter/source"]]
            assert obj["spec"]["groups"] == yaml.safe_load(src.read_text())["groups"]
            out = tmp_path / f"{obj['kind']}-{obj['metadata']['name']}.yml"
            out.write_text(yaml.safe_dump({"groups": obj["spec"]["groups"]}))
            res = subprocess.run([promtool, "check", "rules", str(out)],
                                 capture_output=True, text=True, timeout=60)
            assert res.returncode == 0, res.stdout + res.stderr


def test_tls_overlay_serves_the_secret_web_config(tmp_path: Path) -> None:
    c_base = daemonset("base")["spec"]["template"]["spec"]["containers"][0]
    pod = daemonset("overlays/tls")["spec"]["template"]["spec"]
    c = pod["containers"][0]
    flag = next(a for a in c["args"] if a.startswith("--web.config.file="))
    path = Path(flag.split("=", 1)[1])
    mount = next(m for m in c["volumeMounts"] if path.is_relative_to(m["mountPath"]))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert mount["readOnly"] is True and "secret" in volume
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"]["scheme"] == "HTTPS"
        assert c[probe]["httpGet"]["path"] == "/healthz"
    assert c_base["securityContext"] == c["securityContext"]


# -- the image, from a kustomization of the user's own ------------------------------------
def _image(objects: list[dict[str, Any]]) -> str:
    ds = next(o for o in objects if o["kind"] == "DaemonSet")
    [container] = ds["spec"]["template"]["spec"]["containers"]
    return str(container["image"])


def test_the_base_names_the_image_by_a_kustomize_images_entry() -> None:
    from gpu_exporter import __version__
    k = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())
    assert k["images"] == [{"name": "gpu-exporter", "newTag": __version__}]
    for name in KUSTOMIZATIONS:
        objects = render(K8S / name)
        if any(o["kind"] == "DaemonSet" for o in objects):
            assert _image(objects) == f"gpu-exporter:{__version__}", name


@pytest.mark.parametrize(("entry", "image"), [
    ({"newName": "registry.example.com/gpu/gpu-exporter", "newTag": "1.2.3"},
     "registry.example.com/gpu/gpu-exporter:1.2.3"),
    ({"newName": "registry.example.com:5000/gpu-exporter"},
     "registry.example.com:5000/gpu-exporter:0.1.0"),
    ({"digest": "sha256:" + "ab" * 32}, "gpu-exporter@sha256:" + "ab" * 32),
])
@pytest.mark.parametrize("base", ["base", "overlays/ebpf"])
def test_a_user_sets_the_image_in_a_kustomization_of_their_own(
        tmp_path: Path, base: str, entry: dict[str, str], image: str) -> None:
    """What docs/deploy.md tells a user to write, in a folder of their own that names the
    repository's base (or an overlay): no tracked file is edited."""
    tracked = {p: p.read_bytes() for p in K8S.rglob("*.yaml")}
    mine = tmp_path / "my-cluster"
    mine.mkdir()
    (mine / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(K8S / base, mine)],
        "images": [{"name": "gpu-exporter", **entry}]}))
    objects = render(mine)
    assert _image(objects) == image
    ds = next(o for o in objects if o["kind"] == "DaemonSet")
    kubernetes_validate.validate(ds, K8S_VERSIONS[-1], strict=True)
    assert {p: p.read_bytes() for p in K8S.rglob("*.yaml")} == tracked


def test_the_deploy_doc_sets_the_image_with_kustomize_not_sed() -> None:
    doc = (REPO / "docs" / "deploy.md").read_text()
    section = doc[doc.index("## Kubernetes"):]
    assert "sed -i" not in section
    assert "images:" in section and "newName:" in section
    readme = (REPO / "README.md").read_text()
    assert "images:" in readme[readme.index("**Kubernetes**"):][:800]
