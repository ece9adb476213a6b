"""Sharded scraping as shipped (deploy/kubernetes/scrapers/, deploy/compose/compose.ha.yaml),
end to end: real vmagents in cluster mode with the shipped cluster flags, scraping a
simulated fleet (the fleet simulation's replay target, tests/fleetsim/replay.py) into a
real VictoriaMetrics; and Prometheus agents sharded by hashmod
(deploy/prometheus-agent/agent-shard.yml).

- replicationFactor 1 (vmagent-sharded): every target is scraped by exactly one shard, and
  a shard that restarts leaves its targets' series with a gap (the documented cost);
- replicationFactor 2 with -dedup.minScrapeInterval (vmagent-ha, compose.ha.yaml): every
  sample is stored once, and one shard's restart leaves no gap;
- Prometheus agents with hashmod: every target scraped by exactly one agent, all in storage.

The shipped files scrape every 15 s; here every second, with the deduplication interval
scaled with it (the shipped files keep the two equal, which is checked)."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.kustomize import render
from tests.fleetsim.replay import RECORDED_HOST, node_name
from tests.helpers import REPO, eventually, free_port, require_tool, stop_process
from tests.servers import QueryServer, Server, scrape_config, victoria_metrics, vmagent

SCRAPERS = REPO / "deploy" / "kubernetes" / "scrapers"
COMPOSE_HA = REPO / "deploy" / "compose" / "compose.ha.yaml"
NODES = 12
INTERVAL = 1.0
# Two GPUs of a node, with the recorded identity the replay target personalises.
BODY = "".join(
    f'{name}{{host_name="{RECORDED_HOST}",hw_id="GPU-{i:08x}-1111-2222-3333-44445555660{i}"}}'
    f' {value}\n' for i in range(2) for name, value in (("hw_gpu_up", 1),
                                                        ("hw_gpu_power_draw_watts", 600)))


def cluster_flags(kustomization: str, pod: str) -> list[str]:
    """The -promscrape.cluster.* flags of the shipped StatefulSet's pod `pod` (its name
    stands where the manifest has $(POD_NAME), as Kubernetes substitutes it)."""
    sts = next(o for o in render(SCRAPERS / kustomization) if o["kind"] == "StatefulSet")
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    flags = [a.replace("$(POD_NAME)", pod) for a in args if a.startswith("-promscrape.cluster.")]
    count = next(a for a in flags if a.startswith("-promscrape.cluster.membersCount="))
    assert count == f"-promscrape.cluster.membersCount={sts['spec']['replicas']}"
    return flags


def compose_ha() -> tuple[list[list[str]], list[str]]:
    """The shipped compose HA pair: each vmagent's cluster flags, VictoriaMetrics' dedup."""
    doc = yaml.safe_load(COMPOSE_HA.read_text())["services"]
    agents = [[a for a in doc[s]["command"] if a.startswith("-promscrape.cluster.")]
              for s in ("vmagent", "vmagent-1")]
    dedup = [a for a in doc["victoriametrics"]["command"] if a.startswith("-dedup.")]
    scrape = yaml.safe_load((REPO / "deploy" / "compose" / "scrape.yml").read_text())
    assert dedup == [f"-dedup.minScrapeInterval={scrape['global']['scrape_interval']}"]
    return agents, dedup


@contextmanager
def replay(nodes: int) -> Iterator[list[str]]:
    with tempfile.TemporaryDirectory(prefix="sharding-") as tmp:
        body = Path(tmp) / "body.txt"
        body.write_text(BODY)
        proc = subprocess.Popen([sys.executable, "-m", "tests.fleetsim.replay", str(body),
                                 f"--nodes={nodes}", "--period=1"],
                                stdout=subprocess.PIPE, cwd=REPO)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line, "the replay target exited before it listened"
            yield [f"127.0.0.1:{p}" for p in json.loads(line)["ports"]]
        finally:
            stop_process(proc)  # type: ignore[arg-type]


def shard(es: ExitStack, targets: Sequence[str], vm: QueryServer, flags: Sequence[str]) -> Server:
    job = scrape_config("gpu-exporter", targets, f"{INTERVAL:g}s")
    return es.enter_context(vmagent([job], vm.url + "/api/v1/write", flags))


def scraped_by(agent: Server) -> set[str]:
    """The targets this vmagent scrapes (its active targets), by host:port."""
    doc = agent.get_json("/api/v1/targets")
    return {t["labels"]["instance"] for t in doc["data"]["activeTargets"]}


def samples(vm: QueryServer, host: str, start: float, end: float) -> list[float]:
    """Timestamps of the stored samples of one node's hw_gpu_up series of GPU 0, as the
    query API returns them (raw samples through a range selector, deduplicated)."""
    expr = (f'hw_gpu_up{{host_name="{host}",hw_id=~"GPU-00000000-.*"}}'
            f'[{int(end - start)}s]')
    res = vm.query(expr, at=end)
    assert len(res) == 1, res
    return [float(t) for t, _ in res[0]["values"]]


def stored_since(vm: QueryServer, host: str, since: float, n: int, timeout: float = 30) -> None:
    """Wait until `n` samples of `host` newer than `since` are in storage: the way a test
    here lets scrape intervals pass (storage's own count, not a clock)."""
    eventually(lambda: len(samples(vm, host, since, time.time() - 1)) >= n, timeout,
               f"{n} samples of {host} stored", interval=0.5)


def gaps(ts: Sequence[float]) -> float:
    return max((b - a for a, b in itertools.pairwise(ts)), default=float("inf"))


def hosts_of(agent_targets: set[str], ports: list[str]) -> list[str]:
    return [node_name(ports.index(t)) for t in sorted(agent_targets)]


def test_replication_1_scrapes_every_target_exactly_once_and_a_restart_leaves_a_gap() -> None:
    with replay(NODES) as targets, ExitStack() as es:
        vm = es.enter_context(victoria_metrics())
        flags = [cluster_flags("vmagent-sharded", f"vmagent-gpu-{i}") for i in range(2)]
        assert all("-promscrape.cluster.replicationFactor=1" in f for f in flags)
        agents = [shard(es, targets, vm, f) for f in flags]
        owned = [eventually(lambda a=a: scraped_by(a), 30) for a in agents]  # type: ignore[misc]
        # Each target by exactly one shard, and both shards have a share.
        assert owned[0] | owned[1] == set(targets)
        assert not owned[0] & owned[1], owned[0] & owned[1]
        assert owned[0] and owned[1]
        vm.wait_for(f"count(count_over_time(hw_gpu_up[1m]) >= 1) == {2 * NODES}", 60)
        # Stored once: no target's series holds more samples than the scrapes of one shard.
        t0 = time.time()
        stored_since(vm, node_name(0), t0, 6)
        per_node = {h: samples(vm, h, t0 - 1, time.time() - 1)
                    for h in (node_name(i) for i in range(NODES))}
        for host, ts in per_node.items():
            assert len(ts) <= (time.time() - t0) / INTERVAL + 2, (host, ts)
        # Shard 0 stops for about 6 s: its targets (and only those) get a gap.
        down_hosts = hosts_of(owned[0], targets)
        up_host = hosts_of(owned[1], targets)[0]
        stopped_at = time.time()
        agents[0].stop()
        stored_since(vm, up_host, stopped_at, 8)  # the other shard scrapes on
        restarted = shard(es, targets, vm, flags[0])
        assert eventually(lambda: scraped_by(restarted), 30) == owned[0]
        vm.wait_for(f'count_over_time(hw_gpu_up{{host_name="{down_hosts[0]}"}}[3s]) >= 2', 60)
        end = time.time() - 1
        for h in (node_name(i) for i in range(NODES)):
            gap = gaps(samples(vm, h, stopped_at - 5, end))
            if h in down_hosts:
                assert gap >= 5, (h, gap)
            else:
                assert gap < 3 * INTERVAL, (h, gap)


def test_replication_2_with_dedup_stores_each_sample_once_and_a_restart_leaves_no_gap() -> None:
    compose_flags, _ = compose_ha()
    flags = [cluster_flags("vmagent-ha", f"vmagent-gpu-{i}") for i in range(2)]
    # The compose pair and the Kubernetes overlay are the same cluster.
    assert [sorted(f) for f in flags] == [
        sorted(re.sub(r"memberNum=(\d)", r"memberNum=vmagent-gpu-\1", a) for a in c)
        for c in compose_flags]
    with replay(NODES) as targets, ExitStack() as es:
        vm = es.enter_context(victoria_metrics(
            extra_args=[f"-dedup.minScrapeInterval={INTERVAL:g}s"]))
        agents = [shard(es, targets, vm, f) for f in flags]
        for a in agents:
            assert eventually(lambda a=a: scraped_by(a), 30) == set(targets)  # type: ignore[misc]
        vm.wait_for(f"count(count_over_time(hw_gpu_up[1m]) >= 1) == {2 * NODES}", 60)
        # Both shards write every sample; storage keeps one per interval.
        t0 = time.time()
        stored_since(vm, node_name(0), t0, 6)
        for i in range(NODES):
            ts = samples(vm, node_name(i), t0, time.time() - 1)
            assert len(ts) <= (time.time() - 1 - t0) / INTERVAL + 1, (i, ts)
            assert len(ts) >= 3, (i, ts)
        # Shard 0 stops for about 6 s and comes back: no gap on any node.
        stopped_at = time.time()
        agents[0].stop()
        stored_since(vm, node_name(0), stopped_at, 6)  # written by shard 1 alone
        restarted = shard(es, targets, vm, flags[0])
        assert eventually(lambda: scraped_by(restarted), 30) == set(targets)
        back = time.time()
        stored_since(vm, node_name(0), back, 3)
        end = time.time() - 1
        for i in range(NODES):
            ts = samples(vm, node_name(i), stopped_at - 5, end)
            assert gaps(ts) < 2.5 * INTERVAL, (i, ts)
            assert len(ts) <= (end - stopped_at + 5) / INTERVAL + 1, (i, len(ts))



AGENT_SHARD = REPO / "deploy" / "prometheus-agent" / "agent-shard.yml"


def agent_config(shard: int, targets: Sequence[str], remote_write: str) -> dict[str, Any]:
    """deploy/prometheus-agent/agent-shard.yml as shard `shard` of 2 would run it, with
    this test's targets, interval and storage."""
    doc: dict[str, Any] = yaml.safe_load(AGENT_SHARD.read_text())
    job = doc["scrape_configs"][0]
    keep = job["relabel_configs"][-1]
    assert keep == {"source_labels": ["__tmp_shard"], "regex": "0", "action": "keep"}
    assert job["relabel_configs"][0]["modulus"] == 2
    keep["regex"] = str(shard)
    job["static_configs"] = [{"targets": list(targets)}]
    doc["global"] = {"scrape_interval": f"{INTERVAL:g}s", "scrape_timeout": f"{INTERVAL:g}s"}
    doc["remote_write"] = [{"url": remote_write}]
    return doc


@contextmanager
def prometheus_agent(config: dict[str, Any]) -> Iterator[Server]:
    """Debian's Prometheus 2.42 in agent mode (--enable-feature=agent; 3.x: --agent)."""
    binary = require_tool("prometheus")
    with tempfile.TemporaryDirectory(prefix="prometheus-agent-") as tmp:
        port = free_port()
        (Path(tmp) / "agent.yml").write_text(yaml.safe_dump(config))
        log = Path(tmp) / "agent.log"
        with open(log, "wb") as logf:
            proc = subprocess.Popen([
                binary, "--enable-feature=agent", f"--config.file={tmp}/agent.yml",
                f"--storage.agent.path={tmp}/data", f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn"], stdout=logf, stderr=subprocess.STDOUT, cwd=tmp)
        server = Server("prometheus-agent", proc, port, log, "/-/ready")
        try:
            server.wait_ready()
            yield server
        finally:
            server.stop()


def test_prometheus_agents_with_hashmod_scrape_every_target_exactly_once() -> None:
    with replay(NODES) as targets, ExitStack() as es:
        vm = es.enter_context(victoria_metrics())
        agents = [es.enter_context(prometheus_agent(
            agent_config(i, targets, vm.url + "/api/v1/write"))) for i in range(2)]
        owned = [eventually(lambda a=a: scraped_by(a), 30) for a in agents]  # type: ignore[misc]
        assert owned[0] | owned[1] == set(targets)
        assert not owned[0] & owned[1], owned[0] & owned[1]
        assert owned[0] and owned[1]
        # Both shards' samples reach storage: every node's two GPUs.
        vm.wait_for(f"count(count_over_time(hw_gpu_up[1m]) >= 1) == {2 * NODES}", 60)
        for a in agents:
            assert "agent" in a.get_json("/api/v1/status/flags")["data"]["enable-feature"]
