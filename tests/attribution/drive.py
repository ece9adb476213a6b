"""Thousands of scrapes of the real exporter on a fake NVIDIA node whose energy counters
and processes change between them, read back from the raw exposition.

    python -m tests.attribution.drive WORKDIR STEPS SEED   (prints one JSON line)

Run as a child process: the fake NVML is loaded into it in place of the driver's library
(tests.bench.fleet.load_in_process), which the test process must not get. The exporter
is the real one (nvidia and processes collectors, GpuExporterCollector, prometheus_client's
text exposition); only the GPUs (tests/fake_nvml, C) and /proc (a fake tree) are fakes.

Between scrapes, on four H100s (one of them in MIG mode): energy counters move by random
amounts, processes start and exit (with /proc entries, pids reused with a new start time),
report utilization samples (or none), GPU 2 is lost now and then, the process list of
GPU 1 fails now and then, and GPU 0's counter resets (driver reload) twice.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.exposition import generate_latest

from gpu_exporter.collectors import REGISTRY
from gpu_exporter.model.settings import Settings
from gpu_exporter.scrape.exporter import GpuExporterCollector, make_registry
from tests.attribution.ledger import Ledger
from tests.bench.fleet import load_in_process
from tests.fake_nvml import scenario as fake
from tests.helpers import parse
from tests.processes.procfs import remove_process, write_process

GIB = 1024**3
FAMILIES = ("hw_gpu_energy_consumed_joules_total", "process_gpu_energy_consumed_joules_total",
            "hw_gpu_energy_unattributed_joules_total", "gpu_exporter_processes_folded_total")
GPUS = 4
MIG_GPU = 3
LOST_GPU = 2
FAILING_GPU = 1
# MIG devices of GPU 3: (slot, profile, gpu instance, compute instance)
MIGS = ((0, "3g.40gb", 1, 0), (1, "2g.20gb", 2, 0), (2, "1g.10gb", 3, 0))


@dataclass
class Proc:
    pid: int
    start: int
    device: int
    mig: int | None  # slot of its MIG device
    busy: float  # typical smUtil, percent


@dataclass
class Node:
    rng: random.Random
    procfs: Path
    sc: fake.Scenario
    live: list[Proc] = field(default_factory=list)
    ticks: int = 1000
    pids: tuple[int, ...] = tuple(range(2000, 2030))  # a small pool: pids get reused

    def step(self, n: int) -> None:
        rng = self.rng
        for p in list(self.live):
            if rng.random() < 0.03:
                self.live.remove(p)
                remove_process(self.procfs, p.pid)
        free = [pid for pid in self.pids if pid not in {p.pid for p in self.live}]
        while free and len(self.live) < 14 and rng.random() < 0.3:
            pid = free.pop(rng.randrange(len(free)))
            device = rng.randrange(GPUS)
            mig = rng.randrange(len(MIGS)) if device == MIG_GPU else None
            self.ticks += 1
            p = Proc(pid, self.ticks, device, mig, rng.choice([0.0, 5.0, 40.0, 95.0]))
            write_process(self.procfs, pid, comm=f"job{pid}", start=p.start,
                          cgroup="0::/system.slice/slurmstepd.scope/job_9/step_0/user/task_0\n"
                          if pid % 3 == 0 else "0::/\n")
            self.live.append(p)
        now_us = int(time.time() * 1e6)
        for i, d in enumerate(self.sc.devices):
            d.values["energy_mj"] = int(d.values["energy_mj"]) + rng.choice(
                [0, rng.randrange(1, 700_000), rng.randrange(1, 7_000_000)])
            if i == 0 and n in (700, 1400):
                d.values["energy_mj"] = rng.randrange(0, 50_000)  # driver reload
            here = [p for p in self.live if p.device == i]
            d.processes = [("compute", p.pid, rng.randrange(1, 40) * GIB // 4,
                            *((MIGS[p.mig][2], MIGS[p.mig][3]) if p.mig is not None
                              else (None, None))) for p in here]
            # NVML keeps a ring buffer: the last samples, older ones already read.
            samples = d.process_utilization[-20:]
            for p in here:
                if p.mig is None and rng.random() < 0.8:
                    sm = max(0, min(100, int(rng.gauss(p.busy, 5))))
                    samples.append((p.pid, now_us + n, sm, 0, 0, 0))
            d.process_utilization = samples
            d.lost = i == LOST_GPU and rng.random() < 0.05
            failing = i == FAILING_GPU and rng.random() < 0.03
            for fn in ("nvmlDeviceGetComputeRunningProcesses_v3",):
                if failing:
                    d.errors[fn] = "NO_PERMISSION"
                else:
                    d.errors.pop(fn, None)
        self.sc.write()


def scenario() -> fake.Scenario:
    devices = [fake.h100(i) for i in range(GPUS)]
    for d in devices:
        d.process_utilization = [(1, 1, 0, 0, 0, 0)]  # the function answers (not NOT_SUPPORTED)
    mig = devices[MIG_GPU]
    mig.values["mig_mode"] = 1
    for slot, profile, gi, ci in MIGS:
        mig.migs.append(fake.Mig(slot, f"MIG-{slot:08x}-aaaa-bbbb-cccc-dddddddddddd",
                                 f"{fake.H100_NAME} MIG {profile}", gi, ci,
                                 {"memory_total": 20 * GIB, "memory_used": GIB}))
    return fake.Scenario(devices=devices)


def run(workdir: Path, steps: int, seed: int) -> dict[str, object]:
    procfs = workdir / "proc"
    procfs.mkdir(parents=True, exist_ok=True)
    (workdir / "sys").mkdir(exist_ok=True)
    sc = scenario()
    load_in_process(sc.write(workdir / "node.scenario"))
    settings = Settings(
        sysfs=str(workdir / "sys"), procfs=str(procfs), scrape_timeout_seconds=30.0,
        enabled_collectors=frozenset({"nvidia", "processes"}),
        options={**{o.name: o.default for cls in REGISTRY for o in cls.options},
                 "processes.kubelet-socket": str(workdir / "no-kubelet.sock"),
                 "processes.max-per-gpu": 4},
    )
    exporter = GpuExporterCollector(settings, REGISTRY)
    exporter.start()
    # The text exposition of the families conservation is about (rendering and parsing
    # the other two hundred series of each scrape would be most of the run's time).
    registry = make_registry(exporter).restricted_registry(FAMILIES)
    node = Node(random.Random(seed), procfs, sc)
    hw, attributed = Ledger(), Ledger()
    pci_of: dict[str, str] = {}
    kinds: dict[str, float] = {"consumed": 0.0, "no_process": 0.0, "no_activity_data": 0.0}
    folded = 0.0
    try:
        for n in range(steps):
            node.step(n)
            series = parse(generate_latest(registry).decode())
            mine: dict[Hashable, float] = {}
            theirs: dict[Hashable, float] = {}
            for s in series:
                if s.name == "hw_gpu_energy_consumed_joules_total":
                    theirs[s.labels["gpu_pci_address"]] = s.value
                elif s.name in ("process_gpu_energy_consumed_joules_total",
                                "hw_gpu_energy_unattributed_joules_total"):
                    key = tuple(sorted(s.labels.items()))
                    mine[key] = s.value
                    pci_of[str(key)] = s.labels["gpu_pci_address"]
                elif s.name == "gpu_exporter_processes_folded_total":
                    folded = s.value
            hw.scrape(theirs)
            attributed.scrape(mine)
    finally:
        exporter.close()
    per_gpu: dict[str, float] = {}
    for key, inc in attributed.increase.items():
        per_gpu[pci_of[str(key)]] = per_gpu.get(pci_of[str(key)], 0.0) + inc
        labels = dict(key)  # type: ignore[arg-type]
        kinds[labels.get("reason", "consumed")] += inc
    return {"hw": hw.increase, "attributed": per_gpu, "kinds": kinds, "folded": folded,
            "nonzero_first": [v for v in attributed.first_values.values() if v != 0.0],
            "decreases": attributed.decreases, "series": len(attributed.increase)}


if __name__ == "__main__":
    print(json.dumps(run(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))))
