"""Synthetic series of GPUs running Slurm jobs, for the straggler pack
(alerts/gpu-straggler.rules.yml), imported into a real VictoriaMetrics and evaluated by a
real vmalert in replay mode (simulated time, not wall time).

Each node is scraped every 15 s at its own offset within the interval (as independent
scrapers are). Each sample of a busy GPU jitters independently: SM clock by +-3 %
(uniform), power by +-5 %, utilization by +-3 points. Events change a GPU or a whole job
for a while: `cap` (one GPU 15 % under its peers' clocks), `job_cap` (every GPU of a job
under a facility power cap: clocks and power down together, sw_power_cap on) and `idle`
(every rank of a job idle: utilization 0, clocks and power at idle, gpu_idle on).
PCIe and NVLink replays happen now and then (one an hour on average per GPU).

Only the families the pack reads are written, with the labels the exporter gives them.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import REPO, eventually, require_tool
from tests.servers import QueryServer

PACK = REPO / "alerts" / "gpu-straggler.rules.yml"

SCRAPE_S = 15.0
CLOCK_HZ = 1.98e9
IDLE_CLOCK_HZ = 345e6
POWER_W = 650.0
IDLE_POWER_W = 70.0
CLOCK_JITTER = 0.03
POWER_JITTER = 0.05
UTIL_JITTER = 0.03
REPLAYS_PER_SCRAPE = SCRAPE_S / 3600  # one an hour on average


@dataclass(frozen=True)
class Gpu:
    host: str
    index: int
    job: str

    @property
    def hw_id(self) -> str:
        return f"GPU-{self.host}-{self.index}"


@dataclass(frozen=True)
class Event:
    kind: str  # cap | job_cap | idle
    start_s: float
    end_s: float
    job: str = ""
    gpu: Gpu | None = None
    scale: float = 0.85
    # >0: the event comes back every period_s, lasting end_s - start_s each time
    period_s: float = 0.0

    def on(self, gpu: Gpu, t: float) -> bool:
        if self.period_s:
            if t < self.start_s or (t - self.start_s) % self.period_s >= self.end_s - self.start_s:
                return False
        elif not self.start_s <= t < self.end_s:
            return False
        return gpu == self.gpu if self.kind == "cap" else gpu.job == self.job


@dataclass
class Fleet:
    gpus: list[Gpu]
    events: list[Event] = field(default_factory=list)
    seed: int = 31

    @classmethod
    def of(cls, jobs: dict[str, tuple[int, int]], events: Sequence[Event] = (),
           seed: int = 31) -> Fleet:
        """jobs: job id -> (nodes, GPUs per node); hosts are named after the job."""
        gpus = [Gpu(f"{job}-n{n}", i, job) for job, (nodes, per) in jobs.items()
                for n in range(nodes) for i in range(per)]
        return cls(gpus, list(events), seed)

    def gpu(self, host: str, index: int) -> Gpu:
        return next(g for g in self.gpus if (g.host, g.index) == (host, index))

    def series(self, gpu: Gpu, start_ms: int, duration_s: float) -> Iterator[dict[str, Any]]:
        """VictoriaMetrics' JSON-lines import objects of one GPU, one per series. Its node's
        scrape offset and its jitter are drawn from the seed, the node and the GPU alone,
        so that each GPU can be written on its own."""
        offset = random.Random(f"{self.seed}/{gpu.host}").uniform(0, SCRAPE_S)
        rng = random.Random(f"{self.seed}/{gpu.host}/{gpu.index}")
        times = [offset + k * SCRAPE_S for k in range(int((duration_s - offset) // SCRAPE_S) + 1)]
        cols: dict[str, list[float]] = {k: [] for k in (
            "clock", "power", "util", "idle", "cap", "pcie", "nvlink", "mem")}
        pcie = nvlink = 0
        for t in times:
            idle = any(e.kind == "idle" and e.on(gpu, t) for e in self.events)
            scale = 1.0
            for e in self.events:
                if e.kind in ("cap", "job_cap") and e.on(gpu, t):
                    scale *= e.scale
            job_capped = any(e.kind == "job_cap" and e.on(gpu, t) for e in self.events)
            clock = IDLE_CLOCK_HZ if idle else CLOCK_HZ * scale
            power = IDLE_POWER_W if idle else POWER_W * (scale if job_capped else
                                                         1 - (1 - scale) * 0.6)
            cols["clock"].append(clock * (1 + rng.uniform(-CLOCK_JITTER, CLOCK_JITTER)))
            cols["power"].append(power * (1 + rng.uniform(-POWER_JITTER, POWER_JITTER)))
            cols["util"].append(0.0 if idle else
                                min(1.0, 0.95 + rng.uniform(-UTIL_JITTER, UTIL_JITTER)))
            cols["idle"].append(1.0 if idle else 0.0)
            cols["cap"].append(1.0 if job_capped and not idle else 0.0)
            pcie += rng.random() < REPLAYS_PER_SCRAPE
            nvlink += rng.random() < REPLAYS_PER_SCRAPE
            cols["pcie"].append(float(pcie))
            cols["nvlink"].append(float(nvlink))
            cols["mem"].append(64e9)
        stamps = [start_ms + round(t * 1000) for t in times]
        device = {"hw_id": gpu.hw_id, "gpu_index": str(gpu.index), "host_name": gpu.host,
                  "hw_name": "NVIDIA H100 80GB HBM3", "hw_vendor": "nvidia",
                  "gpu_pci_address": f"0000:{0x18 + gpu.index:02x}:00.0",
                  "job": "gpu-exporter", "instance": f"{gpu.host}:9835"}
        named = [
            ("clock", {"__name__": "hw_gpu_clock_hertz", "hw_gpu_clock_domain": "sm"}),
            ("power", {"__name__": "hw_gpu_power_draw_watts"}),
            ("util", {"__name__": "hw_gpu_utilization_ratio", "hw_gpu_task": "general"}),
            ("idle", {"__name__": "hw_gpu_clock_throttle_active", "reason": "gpu_idle"}),
            ("cap", {"__name__": "hw_gpu_clock_throttle_active", "reason": "sw_power_cap"}),
            ("pcie", {"__name__": "hw_errors_total", "hw_type": "gpu",
                      "error_type": "pcie_replay"}),
            ("nvlink", {"__name__": "hw_errors_total", "hw_type": "gpu",
                        "error_type": "nvlink_replay"}),
            ("mem", {"__name__": "process_gpu_memory_usage_bytes",
                     "slurm_job_id": gpu.job, "process_executable_name": "python3",
                     "process_pid": str(4000 + gpu.index)}),
        ]
        for col, labels in named:
            yield {"metric": {**labels, **device}, "values": cols[col], "timestamps": stamps}

    def series_count(self) -> int:
        return 8 * len(self.gpus)


def import_fleet(vm: QueryServer, fleet: Fleet, start_s: int, duration_s: float) -> int:
    """Writes the fleet's series into VictoriaMetrics, one request per GPU (bounded
    memory), and waits until they are searchable. Returns the samples written."""
    samples = 0
    for gpu in fleet.gpus:
        series = list(fleet.series(gpu, start_s * 1000, duration_s))
        samples += sum(len(s["values"]) for s in series)
        body = b"".join(json.dumps(s, separators=(",", ":")).encode() + b"\n" for s in series)
        req = urllib.request.Request(vm.url + "/api/v1/import", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=120) as r:
            assert r.status == 204, r.status
    vm.http("/internal/force_flush")
    want = fleet.series_count()
    eventually(lambda: len(vm.query("hw_gpu_clock_hertz", at=start_s + duration_s))
               * 8 == want, 30, "imported series searchable", interval=0.5)
    return samples


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def replay(vm: QueryServer, start_s: int, end_s: int, workdir: Path, rules: Path = PACK,
           timeout: float = 300) -> float:
    """`vmalert -replay` of the pack as shipped over [start_s, end_s] of VictoriaMetrics'
    data, recording rules and ALERTS written back into it. Returns the seconds it took.

    The groups are chained (membership, standings, alert), and vmalert replays a file's
    groups one after the other with only a fixed delay between them: each group is
    replayed alone here, in the file's order, and the next starts once what it wrote is
    searchable. -datasource.queryStep=0s makes a group's step its own interval: vmalert
    1.79 otherwise asks every range query for a 5m step."""
    began = time.monotonic()
    doc = yaml.safe_load(rules.read_text())
    for n, group in enumerate(doc["groups"]):
        one = workdir / f"{n}-{group['name']}.rules.yml"
        one.write_text(yaml.safe_dump({"groups": [group]}, sort_keys=False))
        left = timeout - (time.monotonic() - began)
        res = subprocess.run([
            require_tool("vmalert"), f"-rule={one}", f"-datasource.url={vm.url}",
            f"-remoteWrite.url={vm.url}", "-remoteWrite.flushInterval=1s",
            "-datasource.queryStep=0s", f"-replay.timeFrom={_rfc3339(start_s)}",
            f"-replay.timeTo={_rfc3339(end_s)}", "-replay.disableProgressBar",
            "-replay.rulesDelay=0s", "-loggerLevel=INFO",
        ], capture_output=True, text=True, timeout=max(left, 1), env={"TZ": "UTC"})
        out = res.stdout + res.stderr
        written = re.search(r"replay finished! Imported (\d+) samples", out)
        assert res.returncode == 0 and written, out[-3000:]
        names = sorted({r["record"] for r in group["rules"] if "record" in r}
                       | ({"ALERTS", "ALERTS_FOR_STATE"} if any(
                           "alert" in r for r in group["rules"]) else set()))
        selector = "{__name__=~\"" + "|".join(re.escape(x) for x in names) + "\"}"

        def searchable(selector: str = selector, want: int = int(written.group(1))) -> bool:
            vm.http("/internal/force_flush")
            got = sum(len(a.timestamps_s) for a in exported(vm, selector))
            return got >= want

        eventually(searchable, 30, f"group {group['name']}'s samples searchable", interval=0.5)
    return time.monotonic() - began


@dataclass(frozen=True)
class AlertSeries:
    labels: dict[str, str]
    timestamps_s: list[float]


def exported(vm: QueryServer, selector: str) -> list[AlertSeries]:
    """Every stored series of `selector` with its raw timestamps (the export API: no
    lookback or step between us and what vmalert wrote)."""
    status, body = vm.http("/api/v1/export?match[]=" + urllib.parse.quote(selector))
    assert status == 200, body[:300]
    out = []
    for line in body.decode().splitlines():
        doc = json.loads(line)
        out.append(AlertSeries({k: v for k, v in doc["metric"].items() if k != "__name__"},
                               [t / 1000 for t in doc["timestamps"]]))
    return out
