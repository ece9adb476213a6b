"""One simulated node, one real Prometheus, and the VictoriaMetrics path (vmagent ->
VictoriaMetrics, vmalert -> Alertmanager), started once for the e2e module."""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e import fleet as fleet_mod
from tests.e2e.pods import Pods, PodSpec, pods
from tests.helpers import REPO, Exporter, exporter
from tests.rules.rulefiles import RULE_FILES
from tests.servers import (
    QueryServer,
    Server,
    alertmanager,
    prometheus,
    scrape_config,
    victoria_metrics,
    vmagent,
    vmalert,
)

RUN_VMAGENT = REPO / "deploy" / "vmagent" / "run-vmagent.sh"
JOB = "gpu-exporter"  # the job name the alert pack and dashboards expect
GIB = 1024**3
# A pod training on GPU 0, a pod holding GPU 4 and doing nothing with it, a pod that has
# finished but that the kubelet still lists with GPU 4 (kubernetes#119423), and a Slurm
# job's task on GPU 2.
BUSY = PodSpec("ml", "train-0", "e2e00000-0000-4000-8000-000000000001", "trainer",
               "e1" * 32, (fleet_mod.fake.h100(0).uuid,))
IDLE = PodSpec("notebooks", "jupyter-0", "e2e00000-0000-4000-8000-000000000002", "lab",
               "e2" * 32, (fleet_mod.fake.h100(fleet_mod.IDLE_GPU).uuid,))
DONE = PodSpec("batch", "report-28af1", "e2e00000-0000-4000-8000-000000000003", "main",
               "e3" * 32, (fleet_mod.fake.h100(fleet_mod.IDLE_GPU).uuid,), running=False)
SLURM_JOB = "777"


@dataclass
class Stack:
    exporter: Exporter
    prom: QueryServer
    vm: QueryServer
    vmagent: Server
    vmalert: Server
    alertmanager: Server
    fleet: fleet_mod.Fleet
    pods: Pods
    started: float  # time.time() when the exporter started

    @property
    def servers(self) -> dict[str, QueryServer]:
        return {"prometheus": self.prom, "victoriametrics": self.vm}


def fast_rule_copies(dest: Path) -> list[Path]:
    """The rule files as shipped, with the group intervals (1m, and the straggler pack's
    30s) lowered to 2s so that chained recording rules produce data within seconds.
    Nothing else changes."""
    out = []
    for path in RULE_FILES:
        text, n = re.subn(r"(?m)^(\s+interval:) (1m|30s)$", r"\1 2s", path.read_text())
        assert n, f"{path.name}: no group interval to lower"
        (dest / path.name).write_text(text)
        out.append(dest / path.name)
    return out


@pytest.fixture(scope="package")
def stack() -> Iterator[Stack]:
    with tempfile.TemporaryDirectory(prefix="e2e-") as tmp, ExitStack() as es:
        root = Path(tmp)
        node = es.enter_context(pods(root, [BUSY, IDLE, DONE], [SLURM_JOB]))
        fl = fleet_mod.build(root / "fleet", ebpf=True, workloads={
            0: [fleet_mod.Workload(node.pids[BUSY.name], 30 * GIB, True)],
            2: [fleet_mod.Workload(node.jobs[SLURM_JOB], 20 * GIB, True)],
            fleet_mod.IDLE_GPU: [fleet_mod.Workload(node.pids[IDLE.name], 2 * GIB, False)],
        })
        # The pods' cgroups, where the exporter reads (under --path.sysfs) which still run.
        (fl.sysfs.root / "fs").mkdir(exist_ok=True)
        (fl.sysfs.root / "fs" / "cgroup").symlink_to(node.root)
        fl.args += [f"--processes.kubelet-socket={node.socket}",
                    f"--processes.pod-log-dir={node.log_dir}"]
        driver = fleet_mod.LoadDriver(fl)
        driver.start()
        es.callback(driver.stop)
        assert fl.cuda_dir is not None
        cuda = fleet_mod.CudaLoad(fl.cuda_dir)
        cuda.start()
        es.callback(cuda.stop)
        rules_dir = root / "rules"
        rules_dir.mkdir()
        rules = fast_rule_copies(rules_dir)
        started = time.time()
        exp = es.enter_context(exporter(fl.args, fl.env))
        target = f"127.0.0.1:{exp.port}"
        am = es.enter_context(alertmanager())
        # Prometheus' alerts are read from its own API; Alertmanager hears only vmalert.
        prom = es.enter_context(prometheus(scrape=[scrape_config(JOB, [target])],
                                           rule_files=rules))
        vm = es.enter_context(victoria_metrics())
        # vmagent through the shipped command line (deploy/vmagent/run-vmagent.sh)
        agent = es.enter_context(vmagent([scrape_config(JOB, [target])],
                                         vm.url + "/api/v1/write", launcher=[str(RUN_VMAGENT)]))
        va = es.enter_context(vmalert(rules, vm.url, am.url, remote_write_url=vm.url))
        s = Stack(exp, prom, vm, agent, va, am, fl, node, started)
        # Samples, rates (two scrapes apart) and the end of the recording-rule chain.
        for server in s.servers.values():
            server.wait_for(f'up{{job="{JOB}"}} == 1', 60)
            server.wait_for("rate(gpu_kernel_launch_calls_total[1m]) > 0", 120)
            server.wait_for("rate(hw_gpu_energy_consumed_joules_total[1m]) > 0", 60)
            server.wait_for("team:gpu_idle_cost_dollars_per_hour", 90)
            server.wait_for("team:hw_gpu_energy_cost_dollars:increase1h", 90)
            # A subquery samples its rule at whole minutes: data once one has passed.
            server.wait_for("k8s_namespace_name:k8s_gpu_allocation_cost_dollars:increase1d",
                            150)
            server.wait_for("k8s_namespace_name:process_gpu_energy_cost_dollars:increase1d",
                            90)
        yield s
