"""The shipped scrape-side topologies (docs/deploy.md, "Scaling the scrape side"): the
sharded vmagent StatefulSet and its HA overlay, the compose HA pair and the Prometheus
agent shard load in the real tools and say what they claim. tests/e2e/test_sharding.py
runs them."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.kustomize import render
from tests.helpers import REPO, require_tool

SCRAPERS = REPO / "deploy" / "kubernetes" / "scrapers"


def _objects(name: str) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in render(SCRAPERS / name)}


def _args(name: str) -> list[str]:
    sts = _objects(name)["StatefulSet"]
    args: list[str] = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def test_sharded_statefulset_numbers_its_members_from_the_pod_name() -> None:
    objs = _objects("vmagent-sharded")
    sts = objs["StatefulSet"]
    c = sts["spec"]["template"]["spec"]["containers"][0]
    args = c["args"]
    assert f"-promscrape.cluster.membersCount={sts['spec']['replicas']}" in args
    assert "-promscrape.cluster.memberNum=$(POD_NAME)" in args
    assert "-promscrape.cluster.replicationFactor=1" in args
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert sts["spec"]["template"]["spec"]["serviceAccountName"] == (
        objs["ServiceAccount"]["metadata"]["name"])
    subject = objs["ClusterRoleBinding"]["subjects"][0]
    assert subject["namespace"] == sts["metadata"]["namespace"]


def test_ha_overlay_replicates_and_leaves_stream_aggregation_off() -> None:
    args = _args("vmagent-ha")
    assert "-promscrape.cluster.replicationFactor=2" in args
    assert not [a for a in args if "streamAggr" in a]
    assert len(args) == len(_args("vmagent-sharded")) - 1


def test_configmap_scrape_config_loads_in_vmagent_and_aggregation_is_the_shipped_one(
        tmp_path: Path) -> None:
    cm = _objects("vmagent-sharded")["ConfigMap"]["data"]
    shipped = yaml.safe_load((REPO / "deploy" / "vmagent" / "stream-aggr.yml").read_text())
    assert yaml.safe_load(cm["stream-aggr.yml"]) == shipped
    (tmp_path / "scrape.yml").write_text(cm["scrape.yml"])
    res = subprocess.run([require_tool("vmagent"), "-dryRun",
                          f"-promscrape.config={tmp_path / 'scrape.yml'}", "-loggerLevel=ERROR"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    job = yaml.safe_load(cm["scrape.yml"])["scrape_configs"][0]
    assert job["job_name"] == "gpu-exporter"
    # It keeps the endpoints of the base Service's port, by name.
    service = next(o for o in render(REPO / "deploy" / "kubernetes" / "base")
                   if o["kind"] == "Service")
    keep = job["relabel_configs"][0]
    assert keep["regex"] == f"{service['metadata']['name']};{service['spec']['ports'][0]['name']}"
    assert job["kubernetes_sd_configs"][0]["namespaces"]["names"] == [
        service["metadata"]["namespace"]]


def test_prometheus_agent_shard_loads_in_promtool_in_agent_mode() -> None:
    res = subprocess.run([require_tool("promtool"), "check", "config", "--agent",
                          str(REPO / "deploy" / "prometheus-agent" / "agent-shard.yml")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr
