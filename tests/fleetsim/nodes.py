"""Simulated GPU nodes run by the real exporter over the fake NVML: each node has its own
scenario file (eight H100s whose UUIDs and serial numbers carry the node's number), its own
host name (`sim-node-NNNN`, through OTEL_RESOURCE_ATTRIBUTES), its own `--path.procfs`
tree (the driver's /proc/driver/nvidia with the node's UUIDs, /proc/stat, meminfo and one
training process per GPU in a Slurm job's cgroup) and its own empty `--path.sysfs`, so
that sixteen exporters do not all scan one /proc.

`Jitter` moves SM clocks, power and utilization of every node by up to ±`amount` of their
base values, at most once per `period` (each scenario write wakes the exporter's fake XID
wait, so it is kept to one per scrape interval).
"""

from __future__ import annotations

import random
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from tests.fake_nvml import scenario as fake
from tests.fleetsim.replay import (
    RECORDED_HOST,
    SERIAL_PREFIX,
    UUID_GROUP,
    node_name,
    node_serial_prefix,
    node_uuid_group,
)
from tests.helpers import REPO
from tests.processes.procfs import write_process

GPUS_PER_NODE = 8
NODES_PER_JOB = 8  # one Slurm job per eight nodes (64 GPUs), one rank per GPU
DRIVER_FIXTURE = REPO / "tests" / "fixtures" / "procfs" / "nvidia-h100x8" / "driver" / "nvidia"
BASE = {"clock_sm_mhz": 1980, "clock_graphics_mhz": 1980, "power_usage_mw": 600_000,
        "util_gpu": 90}


def slurm_job(n: int) -> str:
    return str(5000 + n // NODES_PER_JOB)


def scenario(n: int | None) -> fake.Scenario:
    """Eight busy, healthy H100s; `n` None keeps the recorded identity (the replay
    target's template), else the node's own UUIDs and serial numbers."""
    devices = []
    for i in range(GPUS_PER_NODE):
        d = fake.h100(i)
        if n is not None:
            d.uuid = d.uuid.replace(UUID_GROUP, node_uuid_group(n))
            d.serial = (d.serial or "").replace(SERIAL_PREFIX, node_serial_prefix(n))
        d.values.update(BASE)
        d.values["clocks_event_reasons"] = 0
        d.processes = [("compute", 4000 + i, 30 * fake.GIB, None, None)]
        devices.append(d)
    return fake.Scenario(devices=devices)


def procfs(root: Path, n: int | None) -> Path:
    """The node's /proc: the driver's tree with its UUIDs, the host's counters, and the
    eight ranks of its Slurm job."""
    proc = root / "proc"
    drv = proc / "driver" / "nvidia"
    (drv / "gpus").mkdir(parents=True, exist_ok=True)
    shutil.copy(DRIVER_FIXTURE / "version", drv / "version")
    template = (DRIVER_FIXTURE / "gpus" / "0000:18:00.0" / "information").read_text()
    for i, d in enumerate(scenario(n).devices):
        bus = d.pci_bus_id[4:].lower()  # 0000:18:00.0
        (drv / "gpus" / bus).mkdir(exist_ok=True)
        (drv / "gpus" / bus / "information").write_text(
            template.replace("GPU-00000000-1111-2222-3333-444455556600", d.uuid)
            .replace("0000:18:00.0", bus).replace("Device Minor: \t 0", f"Device Minor: \t {i}"))
    job = slurm_job(n or 0)
    for i in range(GPUS_PER_NODE):
        write_process(proc, 4000 + i, comm="python3", start=100 + i, cgroup=(
            f"0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_{i}\n"))
    (proc / "stat").write_text(
        "cpu  1000 20 300 8000 100 0 50 0 0 0\ncpu0 1000 20 300 8000 100 0 50 0 0 0\n"
        "intr 0\nctxt 0\nbtime 1700000000\nprocesses 10\nprocs_running 1\nprocs_blocked 0\n")
    (proc / "meminfo").write_text(
        "MemTotal:       2097152000 kB\nMemFree:         1048576000 kB\n"
        "MemAvailable:    1572864000 kB\nBuffers:          512000 kB\n"
        "Cached:          2048000 kB\nSwapCached:            0 kB\n"
        "Active:          4096000 kB\nInactive:        2048000 kB\n"
        "SReclaimable:     256000 kB\nShmem:             64000 kB\n"
        "SwapTotal:             0 kB\nSwapFree:              0 kB\n")
    (proc / "diskstats").write_text("")
    (proc / "net").mkdir(exist_ok=True)
    (proc / "net" / "dev").write_text(
        "Inter-|   Receive                            |  Transmit\n"
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets "
        "errs drop fifo colls carrier compressed\n"
        "  eth0: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0\n")
    (proc / "self").mkdir(exist_ok=True)
    (proc / "self" / "mounts").write_text(f"/dev/fake0 {root} ext4 rw,relatime 0 0\n")
    return proc


@dataclass
class SimNode:
    n: int
    root: Path
    scenario: fake.Scenario
    env: dict[str, str]
    args: list[str]


def build(root: Path, n: int | None, lib_dir: Path) -> SimNode:
    """Node `n`'s files under `root` (None: the recorded template for the replay target)."""
    root.mkdir(parents=True, exist_ok=True)
    sc = scenario(n)
    path = sc.write(root / "gpus.scenario")
    proc = procfs(root, n)
    sysfs = root / "sys"
    sysfs.mkdir(exist_ok=True)
    host = RECORDED_HOST if n is None else node_name(n)
    env = {**fake.env(lib_dir, path), "OTEL_RESOURCE_ATTRIBUTES": f"host.name={host}"}
    return SimNode(-1 if n is None else n, root, sc, env,
                   [f"--path.procfs={proc}", f"--path.sysfs={sysfs}"])


class Jitter(threading.Thread):
    """Every `period` seconds, each node's clocks, power and utilization drawn within
    ±`amount` of their base values, and its scenario written once."""

    def __init__(self, nodes: list[SimNode], amount: float, period: float) -> None:
        super().__init__(name="fleetsim-jitter", daemon=True)
        self.nodes = nodes
        self.amount = amount
        self.period = period
        self.stopped = threading.Event()
        self.rng = random.Random(31)

    def step(self) -> None:
        a = self.amount
        for node in self.nodes:
            for d in node.scenario.devices:
                for key, base in BASE.items():
                    d.values[key] = max(0, round(base * (1 + self.rng.uniform(-a, a))))
                d.values["util_gpu"] = min(100, int(d.values["util_gpu"]))
                d.values["energy_mj"] = (int(d.values["energy_mj"])
                                         + int(int(d.values["power_usage_mw"]) * self.period))
            node.scenario.write()

    def run(self) -> None:
        while not self.stopped.wait(self.period):
            self.step()

    def stop(self) -> None:
        self.stopped.set()
        self.join(10)
