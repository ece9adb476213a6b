"""The fleet simulation: simulated GPU nodes scraped by sharded vmagents into a real
VictoriaMetrics, with vmalert evaluating rule packs and the dashboards' queries run
against the result; what the scrape side costs, measured at each size.

    python -m tests.fleetsim [--sizes 16,64,128] [--rules 'alerts/*.yml' ...]

Sizes up to `--real` nodes run the real exporter over the fake NVML (tests/fleetsim/
nodes.py); larger ones the replay target (tests/fleetsim/replay.py) serving a body recorded
from that same exporter, with each node's identity and jitter.
"""

from __future__ import annotations

import glob
import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.bench.procstat import cpu_seconds, rss_bytes, self_cpu_seconds, system_busy_seconds
from tests.dashboards.panels import queries as dashboard_queries
from tests.dashboards.panels import substitute
from tests.fake_nvml import scenario as fake
from tests.fleetsim import nodes as simnodes
from tests.helpers import REPO, eventually, exporter, stop_process
from tests.servers import (
    QueryServer,
    Server,
    alertmanager,
    scrape_config,
    victoria_metrics,
    vmagent,
    vmalert,
)

JOB = "gpu-exporter"  # the alert pack's default exporter selector


@dataclass
class Config:
    sizes: list[int] = field(default_factory=lambda: [16, 64, 128])
    real: int = 16  # up to this many nodes, real exporters; above, the replay target
    shards: int = 2
    replication: int = 1
    interval: float = 15.0  # scrape and rule-evaluation interval, seconds
    window: float = 60.0  # measured seconds, after the warm-up
    jitter: float = 0.03
    rules: list[str] = field(default_factory=lambda: [str(REPO / "alerts" / "*.yml")])


@dataclass
class Result:
    nodes: int
    gpus: int
    source: str  # "exporter" or "replay"
    series: int
    exporter_series: int  # as scraped, `up` and scrape_* included
    rule_series: int  # recording-rule outputs and ALERTS*
    samples_per_second: float
    cpu: dict[str, float]  # cores (CPU seconds per second) over the window
    rss_mib: dict[str, float]
    rule_groups: dict[str, float]  # group -> mean evaluation seconds
    dashboard_queries: int
    dashboard_seconds: float  # all panel queries once, one after another
    dashboard_slowest: tuple[str, float]
    targets_per_shard: list[int]
    # CPU the rest of the machine used meanwhile (cores): the other engineers' work on a
    # shared box, and this simulation's own harness
    other_load: float = 0.0

    @property
    def series_per_gpu(self) -> float:
        return self.series / self.gpus


def rule_files(patterns: Sequence[str], dest: Path, interval: float) -> list[Path]:
    """Copies of the rule files with every group's `interval:` set to the simulation's
    interval, so that chained recording rules fill within the warm-up. Series counts and
    the cost of one evaluation do not depend on the interval."""
    out = []
    for pattern in patterns:
        for src in sorted(glob.glob(pattern)):
            text = re.sub(r"(?m)^(\s+interval:)\s*\S+$", rf"\g<1> {interval:g}s",
                          Path(src).read_text())
            target = dest / f"{len(out):02d}-{Path(src).name}"
            target.write_text(text)
            out.append(target)
    if not out:
        raise SystemExit(f"fleetsim: no rule file matches {list(patterns)}")
    return out


def _metrics(url: str) -> dict[str, float]:
    """A server's own /metrics, summed by name and label set."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, val = line.rpartition(" ")
            try:
                out[key] = float(val)
            except ValueError:
                continue
    return out


def _sum(metrics: dict[str, float], name: str, **labels: str) -> float:
    total = 0.0
    for key, val in metrics.items():
        if ((key == name or key.startswith(name + "{"))
                and all(f'{k}="{v}"' in key for k, v in labels.items())):
            total += val
    return total


def _rule_groups(metrics: dict[str, float]) -> dict[str, float]:
    """Mean seconds per evaluation of each group, from vmalert's own summary."""
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for key, val in metrics.items():
        m = re.match(r'vmalert_iteration_duration_seconds_(sum|count)\{.*group="([^"]+)"', key)
        if m:
            (sums if m.group(1) == "sum" else counts)[m.group(2)] = val
    return {g: sums[g] / counts[g] for g in sorted(sums) if counts.get(g)}


@contextmanager
def _targets(cfg: Config, n: int, root: Path, lib_dir: Path,
             procs: dict[str, list[subprocess.Popen[bytes]]]) -> Iterator[list[str]]:
    """`n` simulated nodes; yields their host:port."""
    with ExitStack() as es:
        if n <= cfg.real:
            nodes = [simnodes.build(root / f"node-{i:04d}", i, lib_dir) for i in range(n)]
            jitter = simnodes.Jitter(nodes, cfg.jitter, cfg.interval)
            exps = [es.enter_context(exporter(node.args, env=node.env, start_timeout=120))
                    for node in nodes]
            jitter.start()
            es.callback(jitter.stop)
            procs["exporters"] = [e.proc for e in exps]
            yield [f"127.0.0.1:{e.port}" for e in exps]
            return
        body = record_body(root.parent / "recorded", lib_dir)
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fleetsim.replay", str(body), f"--nodes={n}",
             f"--jitter={cfg.jitter}", f"--period={cfg.interval}"],
            stdout=subprocess.PIPE, cwd=REPO)
        es.callback(stop_process, proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, "the replay target exited before it listened"
        procs["replay"] = [proc]
        yield [f"127.0.0.1:{p}" for p in json.loads(line)["ports"]]


_recorded: dict[Path, Path] = {}


def record_body(root: Path, lib_dir: Path) -> Path:
    """One scrape of the real exporter on the template node (identity fleetsim-recorded),
    after a first scrape so that rates and per-process deltas are in it."""
    if root in _recorded:
        return _recorded[root]
    node = simnodes.build(root, None, lib_dir)
    with exporter(node.args, env=node.env, start_timeout=120) as exp:
        exp.scrape()
        body = exp.scrape()
    path = root / "body.txt"
    path.write_text(body)
    _recorded[root] = path
    return path


def _cpu(procs: list[subprocess.Popen[bytes]]) -> float:
    return sum(cpu_seconds(p.pid) for p in procs if p.poll() is None)


def run_size(cfg: Config, n: int, root: Path, lib_dir: Path, log: bool = True) -> Result:
    root.mkdir(parents=True, exist_ok=True)
    rules = rule_files(cfg.rules, _fresh(root / "rules"), cfg.interval)
    interval = f"{cfg.interval:g}s"
    procs: dict[str, list[subprocess.Popen[bytes]]] = {}
    vm_args = [f"-dedup.minScrapeInterval={interval}"] if cfg.replication > 1 else []
    with ExitStack() as es:
        targets = es.enter_context(_targets(cfg, n, root / f"size-{n}", lib_dir, procs))
        vm = es.enter_context(victoria_metrics(extra_args=vm_args))
        job = scrape_config(JOB, targets, interval)
        job["scrape_timeout"] = f"{min(cfg.interval, 10):g}s"
        agents: list[Server] = [es.enter_context(vmagent([job], vm.url + "/api/v1/write", [
            f"-promscrape.cluster.membersCount={cfg.shards}",
            f"-promscrape.cluster.memberNum={i}",
            f"-promscrape.cluster.replicationFactor={cfg.replication}"]))
            for i in range(cfg.shards)]
        am = es.enter_context(alertmanager())
        alerter = es.enter_context(vmalert(rules, vm.url, am.url, vm.url, interval))
        procs.update({"vmagent": [a.proc for a in agents], "victoria-metrics": [vm.proc],
                      "vmalert": [alerter.proc]})
        if log:
            print(f"fleetsim: {n} nodes up; warming up", file=sys.stderr, flush=True)
        vm.wait_for(f'count(up{{job="{JOB}"}} == 1) == {n}', timeout=3 * cfg.interval + 60)
        # Two rounds of every group after the first samples: chained rules have data.
        eventually(lambda: min(_rule_groups(_metrics(alerter.url)).values() or [0]) > 0
                   and _iterations(alerter) >= 3, 6 * cfg.interval + 60,
                   "every rule group evaluated three times", interval=1)
        cpu0 = {k: _cpu(v) for k, v in procs.items()}
        busy0, own0 = system_busy_seconds(), self_cpu_seconds()
        rows0 = _sum(_metrics(vm.url), "vm_rows_inserted_total")
        t0 = time.monotonic()
        time.sleep(cfg.window)  # the measured window: real time must pass
        elapsed = time.monotonic() - t0
        rows1 = _sum(_metrics(vm.url), "vm_rows_inserted_total")
        cpu = {k: (_cpu(v) - cpu0[k]) / elapsed for k, v in procs.items()}
        other = (system_busy_seconds() - busy0 - (self_cpu_seconds() - own0)
                 - sum(cpu.values()) * elapsed) / elapsed
        rss = {k: sum(rss_bytes(p.pid) for p in v if p.poll() is None) / 2**20
               for k, v in procs.items()}
        total, scraped, recorded = _series(vm)
        groups = _rule_groups(_metrics(alerter.url))
        dash = _dashboards(vm)
        per_shard = [int(_sum(_metrics(a.url), "vm_promscrape_targets", status="up"))
                     for a in agents]
    return Result(nodes=n, gpus=n * simnodes.GPUS_PER_NODE,
                  source="exporter" if n <= cfg.real else "replay", series=total,
                  exporter_series=scraped, rule_series=recorded,
                  samples_per_second=(rows1 - rows0) / elapsed, cpu=cpu, rss_mib=rss,
                  rule_groups=groups, dashboard_queries=dash[0], dashboard_seconds=dash[1],
                  dashboard_slowest=dash[2], targets_per_shard=per_shard,
                  other_load=other)


def _iterations(alerter: Server) -> float:
    m = _metrics(alerter.url)
    counts = [v for k, v in m.items() if k.startswith("vmalert_iteration_duration_seconds_count")]
    return min(counts) if counts else 0


def _series(vm: QueryServer) -> tuple[int, int, int]:
    """Series in storage now (the last 5 minutes): all, scraped, written by rules."""
    def count(expr: str) -> int:
        res = vm.query(expr)
        return int(float(res[0]["value"][1])) if res else 0

    total = count('count({__name__=~".+"})')
    rules = count('count({__name__=~".*:.*|ALERTS|ALERTS_FOR_STATE"})')
    return total, total - rules, rules


def _dashboards(vm: QueryServer) -> tuple[int, float, tuple[str, float]]:
    """Every panel query of dashboards/ once, as Grafana sends it for the last hour."""
    end = time.time()
    total, slowest = 0.0, ("", 0.0)
    qs = dashboard_queries()
    for q in qs:
        t = time.monotonic()
        vm.query_range(substitute(q.expr), end - 3600, end, 60)
        took = time.monotonic() - t
        total += took
        if took > slowest[1]:
            slowest = (q.id, took)
    return len(qs), total, slowest


def _fresh(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for p in path.iterdir():
        p.unlink()
    return path


def run(cfg: Config, log: bool = True) -> list[Result]:
    lib_dir = fake.build()
    with tempfile.TemporaryDirectory(prefix="fleetsim-") as tmp:
        return [run_size(cfg, n, Path(tmp), lib_dir, log) for n in cfg.sizes]


def fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares line y = a + b·x."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - b * mx, b


def table(results: Sequence[Result], cfg: Config) -> str:
    """The measured rows, then the fitted lines and their extrapolation."""
    comps = sorted({k for r in results for k in r.cpu})
    head = ["nodes", "GPUs", "source", "series", "series/GPU", "of which rules/GPU",
            "samples/s", *(f"CPU {k} (cores)" for k in comps),
            *(f"RSS {k} (MiB)" for k in comps), "slowest rule group (ms)",
            "dashboards: all queries (s)", "targets per shard",
            "others' load (cores)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        slowest = max(r.rule_groups.items(), key=lambda kv: kv[1], default=("-", 0.0))
        row = [str(r.nodes), str(r.gpus), r.source, f"{r.series:,}", f"{r.series_per_gpu:.1f}",
               f"{r.rule_series / r.gpus:.1f}", f"{r.samples_per_second:,.0f}",
               *(f"{r.cpu.get(k, 0):.3f}" for k in comps),
               *(f"{r.rss_mib.get(k, 0):.0f}" for k in comps),
               f"{slowest[0]} {slowest[1] * 1000:.1f}", f"{r.dashboard_seconds:.2f}",
               "/".join(map(str, r.targets_per_shard)), f"{r.other_load:.2f}"]
        lines.append("| " + " | ".join(row) + " |")
    out = [f"Fleet simulation: {cfg.shards} vmagent shards (replicationFactor "
           f"{cfg.replication}), scrape and rule interval {cfg.interval:g} s, "
           f"{cfg.window:g} s measured per size, jitter ±{cfg.jitter:.0%}.", "",
           *lines, "", "Rule groups, mean evaluation time (ms) by size:", ""]
    groups = sorted({g for r in results for g in r.rule_groups})
    out.append("| group | " + " | ".join(f"{r.gpus} GPUs" for r in results) + " |")
    out.append("|---|" + "---|" * len(results))
    for g in groups:
        out.append(f"| {g} | " + " | ".join(f"{r.rule_groups.get(g, 0) * 1000:.1f}"
                                           for r in results) + " |")
    if len(results) >= 2:
        out += ["", "Fitted y = a + b·GPUs (least squares over the measured sizes) and "
                "extrapolated (not measured):", ""]
        xs = [float(r.gpus) for r in results]
        metrics: list[tuple[str, list[float]]] = [
            ("series", [float(r.series) for r in results]),
            ("samples/s", [r.samples_per_second for r in results]),
            *((f"CPU {k} (cores)", [r.cpu.get(k, 0.0) for r in results])
              for k in ("vmagent", "victoria-metrics", "vmalert")),
            *((f"RSS {k} (MiB)", [r.rss_mib.get(k, 0.0) for r in results])
              for k in ("vmagent", "victoria-metrics", "vmalert")),
            ("slowest rule group (s)", [max(r.rule_groups.values(), default=0.0)
                                        for r in results]),
        ]
        out.append("| metric | a | b (per GPU) | 1,000 GPUs | 10,000 GPUs | 100,000 GPUs |")
        out.append("|---|---|---|---|---|---|")
        for name, ys in metrics:
            a, b = fit(xs, ys)
            out.append(f"| {name} | {a:.4g} | {b:.4g} | "
                       + " | ".join(f"{a + b * g:,.4g}" for g in (1_000, 10_000, 100_000))
                       + " |")
    return "\n".join(out)


def to_json(results: Sequence[Result]) -> str:
    return json.dumps([asdict(r) | {"series_per_gpu": r.series_per_gpu} for r in results],
                      indent=2)
