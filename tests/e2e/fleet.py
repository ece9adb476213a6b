"""A simulated GPU node for the end-to-end test and `make demo`: the test suite's fake NVML
library (four H100s, under changing load), real AMD and Intel sysfs captures, and two
Gaudi 2 accelerators on the fake HLML (tests/fake_hlml) with their PCI functions, with a
load driver that moves utilization, power and the energy counters every second; with
`ebpf=True` also the eBPF tests' fake CUDA libraries and a workload that runs again and
again (kernel launches, copies, allocations, synchronisation) for the real uprobes.

    python -m tests.e2e.fleet DIR [--ebpf]
        prepare DIR, print the exporter's environment and arguments as shell lines, then
        drive the load (and with --ebpf the CUDA workload) until killed: what
        scripts/demo.sh runs
"""

from __future__ import annotations

import math
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.fake_hlml import scenario as fake_hlml
from tests.fake_nvml import scenario as fake
from tests.host import power_tree
from tests.sysfs.tree import FakeSysfs, card_switch, root_port

GIB = 1024**3

# Resource labels every series gets: the team the dashboards group by, and a marker that
# this is simulated data.
RESOURCE_ATTRIBUTES = "team=ml-platform,deployment.environment=demo,demo=true"


@dataclass(frozen=True)
class Workload:
    """A process on a GPU: busy ones report utilization samples that follow the GPU's
    utilization, idle ones (holding memory, doing nothing) samples of 0."""

    pid: int
    memory_bytes: int
    busy: bool


IDLE_GPU = 4
GAUDIS = ("0000:b3:00.0", "0000:b4:00.0")


def scenario(pid: int, workloads: dict[int, list[Workload]] | None = None) -> fake.Scenario:
    """Five H100s: 0 busy with a critical XID (79: reboot the node), 1 nearly idle with
    an application XID (13) and one past NVIDIA's catalog (999), 2 thermally throttled with
    XID 63 (row remapping recorded),
    3 with an uncorrected ECC error and its memory almost full, held busy by little work
    (utilization 97 %, SM activity 4 %: GpuBusyButSmIdle), 4 idle (held by a pod in the
    end-to-end test). The processes: `workloads` by GPU, else this `pid` on GPU 0."""
    devices = [fake.h100(i) for i in range(5)]
    devices[0].xids = [79]
    for i, procs in (workloads or {0: [Workload(pid, 30 * GIB, True)]}).items():
        devices[i].processes = [("compute", w.pid, w.memory_bytes, None, None)
                                for w in procs]
    devices[1].values["util_gpu"] = 3
    devices[1].xids = [13, 999]
    devices[IDLE_GPU].values.update({"util_gpu": 0, "util_memory": 0, "power_usage_mw": 70_000,
                                     "memory_used": 2 * GIB})
    devices[2].values["clocks_event_reasons"] = fake.REASON_HW_THERMAL | fake.REASON_SW_THERMAL
    devices[2].xids = [63]
    devices[3].values["ecc_uncorrected"] = 1
    devices[3].values["memory_used"] = 78 * GIB  # 97.5% of 80 GiB
    devices[3].values["util_gpu"] = 97
    for i, d in enumerate(devices):
        d.gpm.update(_gpm(i, int(d.values["util_gpu"])))
    return fake.Scenario(devices=devices)


def _gpm(i: int, util: int) -> dict[int, float | str]:
    """GPM activity that goes with a utilization: a training step's share of it, except
    GPU 3, whose one small kernel keeps it "busy" while its SMs idle."""
    if i == 3:
        return {fake.GPM_GRAPHICS_UTIL: util, fake.GPM_SM_UTIL: 4, fake.GPM_SM_OCCUPANCY: 1,
                fake.GPM_ANY_TENSOR_UTIL: 0.5, fake.GPM_HMMA_TENSOR_UTIL: 0.5,
                fake.GPM_DRAM_BW_UTIL: 2}
    return {fake.GPM_GRAPHICS_UTIL: util, fake.GPM_SM_UTIL: round(util * 0.75, 2),
            fake.GPM_SM_OCCUPANCY: round(util * 0.35, 2),
            fake.GPM_ANY_TENSOR_UTIL: round(util * 0.5, 2),
            fake.GPM_HMMA_TENSOR_UTIL: round(util * 0.45, 2),
            fake.GPM_DRAM_BW_UTIL: round(util * 0.55, 2)}


@dataclass
class Fleet:
    root: Path
    scenario: fake.Scenario
    scenario_path: Path
    sysfs: FakeSysfs
    lib_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    cuda_dir: Path | None = None  # fake CUDA libraries and workload, when eBPF is on
    workloads: dict[int, list[Workload]] = field(default_factory=dict)
    gaudi: fake_hlml.Scenario = field(default_factory=fake_hlml.Scenario)


def build(root: Path, pid: int | None = None, ebpf: bool = False,
          workloads: dict[int, list[Workload]] | None = None) -> Fleet:
    """Prepare the fake NVML library, its scenario and a fake /sys under `root`; with
    `ebpf`, also the fake CUDA libraries and workload (`root/cuda`) and the flags that
    enable the eBPF collector (needs root, bcc and kernel headers, as CI has)."""
    root.mkdir(parents=True, exist_ok=True)
    lib_dir = fake.build()
    sc = scenario(pid if pid is not None else os.getpid(), workloads)
    path = sc.write(root / "gpus.scenario")
    sysfs = FakeSysfs(root / "sys")
    # Each card below its own PCIe switch, as on a real board. The RX 6900 XT is busy and
    # trained to x8 of x16 (a riser fault), the Arc A380 runs its full Gen4 x8.
    amd = sysfs.add("rx6900xt", "0000:0b:00.0", 0, ports=(
        root_port("0000:00:03.1", "1022:1483", "16.0 GT/s PCIe", 16, ("16.0 GT/s PCIe", 8)),
        *card_switch("navi21", "0000:09:00.0", "0000:0a:00.0", slot=("16.0 GT/s PCIe", 8),
                     inner=("16.0 GT/s PCIe", 16))))
    (amd.device / "gpu_busy_percent").write_text("90\n")
    sysfs.add("a380", "0000:0e:00.0", 1, ports=(
        root_port("0000:00:03.2", "1022:1483", "16.0 GT/s PCIe", 16, ("16.0 GT/s PCIe", 8)),
        *card_switch("dg2", "0000:0c:00.0", "0000:0d:01.0", slot=("16.0 GT/s PCIe", 8),
                     inner=("2.5 GT/s PCIe", 1))))
    # The rest of the node: two Intel sockets' RAPL zones (package, dram), moved by the
    # load driver, and the BMC's meter of the whole system.
    power_tree.intel_two_sockets(sysfs.root, start_uj=1_000_000_000)
    power_tree.power_meter(sysfs.root, 20, 0, "", 1_800_000_000)
    # Two Gaudi 2 (no DRM card: accel nodes), read through HLML by the gaudi collector.
    for minor, address in enumerate(GAUDIS):
        sysfs.add_accel("gaudi2", address, minor)
    gaudi = fake_hlml.Scenario(devices=[fake_hlml.gaudi2(i, a) for i, a in enumerate(GAUDIS)])
    env = {**fake.env(lib_dir, path), "OTEL_RESOURCE_ATTRIBUTES": RESOURCE_ATTRIBUTES,
           fake_hlml.ENV_VAR: str(gaudi.write(root / "hlml.scenario"))}
    args = [f"--path.sysfs={sysfs.root}", f"--gaudi.hlml-library={fake_hlml.build()}"]
    fl = Fleet(root, sc, path, sysfs, lib_dir, env, args,
               workloads=workloads or {0: [Workload(pid or os.getpid(), 30 * GIB, True)]},
               gaudi=gaudi)
    if ebpf:
        from tests.ebpf.conftest import build_into

        fl.cuda_dir = build_into(root / "cuda").dir
        fl.args += ["--collector.ebpf", "--ebpf.rescan-interval=0.5"]
    return fl


class LoadDriver(threading.Thread):
    """Moves the fleet every `period` seconds like a node under load: utilization
    oscillates, power follows it, energy counters (NVML and Intel hwmon) integrate power."""

    def __init__(self, fleet: Fleet, period: float = 1.0) -> None:
        super().__init__(name="fleet-load", daemon=True)
        self.fleet = fleet
        self.period = period
        self.stopped = threading.Event()
        self.intel_energy = sorted(fleet.sysfs.cards["0000:0e:00.0"].device.glob(
            "hwmon/hwmon*/energy1_input"))
        # RAPL counters (µJ): ~180 W per package, ~25 W per DRAM
        self.rapl = [(f, 180e6 if "dram" not in f.parent.joinpath("name").read_text()
                      else 25e6)
                     for f in sorted(fleet.sysfs.root.glob(  # each zone once: no links
                         "devices/virtual/powercap/intel-rapl/**/energy_uj"))]

    def step(self, t: float) -> None:
        now_us = int(time.time() * 1e6)
        for i, d in enumerate(self.fleet.scenario.devices):
            # the nearly idle one (GPU 1) stays so, the idle one (GPU 4) idle, GPU 3 busy
            util = (3 if i == 1 else 0 if i == IDLE_GPU else 97 if i == 3
                    else int(70 + 25 * math.sin(t / 20 + i)))
            power_mw = 70_000 if i == IDLE_GPU else 100_000 + util * 6_000
            d.values["util_gpu"] = util
            d.gpm.update(_gpm(i, util))
            d.values["power_usage_mw"] = power_mw
            # One utilization sample per process and step, as NVML's ring buffer keeps
            # them (the last ten seconds).
            d.process_utilization = [
                *(u for u in d.process_utilization if u[1] > now_us - 10_000_000),
                *((w.pid, now_us, util if w.busy else 0, 0, 0, 0)
                  for w in self.fleet.workloads.get(i, []))]
            d.values["energy_mj"] = int(d.values["energy_mj"]) + int(power_mw * self.period)
            d.values["pcie_tx_bytes"] = int(d.values["pcie_tx_bytes"]) + 50_000_000
            d.values["pcie_rx_bytes"] = int(d.values["pcie_rx_bytes"]) + 80_000_000
            d.values["ecc_corrected"] = int(d.values["ecc_corrected"]) + i
        self.fleet.scenario.write()
        for i, g in enumerate(self.fleet.gaudi.devices):  # HLML's units: %, mW, mJ
            util = int(60 + 30 * math.sin(t / 15 + i))
            g.values["util_aip"] = util
            g.values["power_mw"] = 150_000 + util * 4_000
            g.values["energy_mj"] += int(g.values["power_mw"] * self.period)
        self.fleet.gaudi.write()
        for f in self.intel_energy:  # µJ, ~35 W
            now = int(f.read_bytes().split(b"\0", 1)[0] or b"0")
            f.write_text(f"{now + int(35e6 * self.period)}\n")
        for f, watts in self.rapl:
            now = int(f.read_bytes().strip() or b"0")
            f.write_text(f"{(now + int(watts * self.period)) % power_tree.INTEL_RANGE_UJ}\n")

    def run(self) -> None:
        start = time.monotonic()
        while not self.stopped.wait(self.period):
            self.step(time.monotonic() - start)

    def stop(self) -> None:
        self.stopped.set()
        self.join(5)


class CudaLoad(threading.Thread):
    """Runs the eBPF tests' workload (`workload runtime N`) over and over: each run maps
    the fake libcudart/libcuda, waits until told to go, then launches kernels, copies,
    allocates and synchronises. The waiting process is what the exporter's library scan
    finds, so probes attach before the first run counts."""

    def __init__(self, cuda_dir: Path, launches: int = 200, pause: float = 0.5) -> None:
        super().__init__(name="cuda-load", daemon=True)
        self.argv = [str(cuda_dir / "workload"), "runtime", str(launches), "--wait"]
        self.pause = pause
        self.stopped = threading.Event()
        self.runs = 0
        self.next: subprocess.Popen[str] | None = None

    def _spawn(self) -> subprocess.Popen[str]:
        proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            proc.kill()
            raise RuntimeError(f"{self.argv}: {line!r}")
        return proc

    def run(self) -> None:
        self.next = self._spawn()
        while not self.stopped.wait(self.pause):
            proc, self.next = self.next, self._spawn()  # one always waits, mapped
            proc.communicate("go\n", timeout=60)
            self.runs += 1
        if self.next is not None:
            self.next.kill()
            self.next.wait()

    def stop(self) -> None:
        self.stopped.set()
        self.join(70)


def main(argv: list[str]) -> int:
    fleet = build(Path(argv[1]), ebpf="--ebpf" in argv[2:])
    for k, v in fleet.env.items():
        print(f"export {k}={shlex.quote(v)}")
    print(f"EXPORTER_ARGS={shlex.quote(' '.join(fleet.args))}", flush=True)
    driver = LoadDriver(fleet)
    cuda = CudaLoad(fleet.cuda_dir) if fleet.cuda_dir else None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    driver.start()
    if cuda:
        cuda.start()
    try:
        while not stop.wait(1):
            pass
    except KeyboardInterrupt:
        pass
    driver.stop()
    if cuda:
        cuda.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
