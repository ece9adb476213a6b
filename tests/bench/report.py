"""Turn build/bench/results.json (written by `make bench`) into the tables of
docs/performance.md: `python -m tests.bench.report` rewrites the part of that file
between the `bench:begin` and `bench:end` markers and leaves the rest alone."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.bench.conftest import RESULTS
from tests.bench.stats import linear_fit
from tests.helpers import REPO

DOC = REPO / "docs" / "performance.md"
BEGIN, END = "<!-- bench:begin (generated: python -m tests.bench.report) -->", "<!-- bench:end -->"
MIB = 1024 * 1024


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} µs"


def _scrape_vs_floor(rows: Mapping[str, Any]) -> list[str]:
    out = [
        "| GPUs | NVML delay | series (of which kernel-name) | NVML calls | exporter p50 | "
        "exporter p99 | floor p50 | floor p99 | ratio p50 | ratio p99 | target p99 ≤ 1.0× | "
        "rounds | other load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows.values(), key=lambda r: (r["call_delay_us"], r["gpus"])):
        met = "met" if r["ratio_p99"] <= 1.0 else "**not met**"
        out.append(
            f"| {r['gpus']} | {r['call_delay_us']} µs | "
            f"{r['series']} ({r.get('kernel_series', 0)}) | "
            f"{r['nvml_calls']} | "
            f"{ms(r['exporter_p50'])} | {ms(r['exporter_p99'])} | {ms(r['floor_p50'])} | "
            f"{ms(r['floor_p99'])} | {r['ratio_p50']:.2f}× | {r['ratio_p99']:.2f}× | {met} | "
            f"{r['rounds']} | {max(0.0, r.get('other_load_cpus', float('nan'))):.2f} CPU |"
        )
    out += ["", "Other load: CPUs' worth of work by other processes on the machine during "
            "that case's rounds (/proc/stat less this process); the VM has 2. The exporter "
            "hands work between threads and suffers more from it than the one-thread floor."]
    return out


def _scaling(rows: Mapping[str, Any], x_name: str) -> list[str]:
    pts = sorted(rows.values(), key=lambda r: r["x"])
    a, b, r2 = linear_fit([p["x"] for p in pts], [p["median"] for p in pts])
    first = f"| {x_name} | series | median scrape | linear fit | residual |"
    if x_name == "series":
        first = "| processes | series | median scrape | linear fit | residual |"
    out = [first, "|---|---|---|---|---|"]
    for p in pts:
        fit = a + b * p["x"]
        lead = p.get("processes", p["x"])
        out.append(f"| {lead} | {p['series']} | {ms(p['median'])} | {ms(fit)} | "
                   f"{(p['median'] - fit) / fit * 100:+.0f}% |")
    unit = "GPU" if x_name == "GPUs" else "series"
    out += ["", f"Least-squares line: {ms(a)} + {b * 1e6:.1f} µs per {unit}; R² = {r2:.4f}."]
    return out


def _breakdown(r: Mapping[str, Any]) -> list[str]:
    total = r["exporter_scrape"]
    out = ["| part (median of interleaved rounds) | time | share of the scrape |",
           "|---|---|---|"]
    for key, label in BREAKDOWN_LABELS:
        if key in r:
            out.append(f"| {label} | {ms(r[key])} | {r[key] / total * 100:.0f}% |")
    return out


BREAKDOWN_LABELS = (
    ("exporter_scrape", "whole scrape (`generate_latest` of the exporter's registry)"),
    ("nvidia_collect", "nvidia collector `collect()` alone (readings and their `hw_gpu_*` "
     "samples)"),
    ("ebpf_collect", "ebpf collector `collect()` alone (2,000 launch series)"),
    ("processes_collect", "processes collector `collect()` alone"),
    ("processes_proc_lookups", "  in it: /proc lookups of the 200 NVML pids (alone)"),
    ("processes_nvml", "  in it: NVML process queries (alone)"),
    ("merge", "merge: label joins, self-metrics, prometheus_client families (`merge`)"),
    ("render", "text rendering of the finished families"),
    ("orchestration", "rest: collector threads, hand-offs, GIL contention"),
    ("floor_nvml", "floor: NVML calls replayed"),
    ("floor_render", "floor: rendering (same as above)"),
    ("floor_total", "floor total"),
)


def _host_node(rows: Mapping[str, Any]) -> list[str]:
    out = ["| answer | CPU of the process (ticks) | CPU of its threads (schedstat) | "
           "wake-ups | RSS at the end | series | threads |", "|---|---|---|---|---|---|---|"]
    for r in sorted(rows.values(), key=lambda r: r.get("gzip", False)):
        out.append(f"| {'gzip' if r.get('gzip') else 'plain'} | "
                   f"{r['cpu_ms_per_second']:.2f} ms/s | "
                   f"{r['thread_cpu_ms_per_second']:.2f} ms/s | "
                   f"{r['wakeups_per_second']:.1f}/s | {r['rss_bytes'] / MIB:.1f} MiB | "
                   f"{r['series']} | {r['threads']} |")
    seconds = next(iter(rows.values()))["seconds"]
    return [*out, "", f"Both exporters side by side, {seconds} s; target ≤ 3 ms/s, "
            "RSS ≤ 60 MB."]


_PIPELINE = (  # (key, what, target, format)
    ("onehz_2gpu_ms_per_second", "1 Hz, 2 GPUs + host, 1 process: CPU per second", 3.0,
     "{:.2f} ms/s"),
    ("onehz_8gpu_ms_per_second", "1 Hz, 8 GPUs, 200 live processes: CPU per second", 10.0,
     "{:.2f} ms/s"),
    ("idle_ms_per_second", "idle, all threads", 0.5, "{:.3f} ms/s"),
    ("burst_rss_mib", "RSS after the 20-scraper burst (8 GPUs, 200 processes)", 43.0,
     "{:.1f} MiB"),
    ("kernels_p50_ms", "2,000 kernel series, 8 GPUs, 200 processes: CPU per scrape p50",
     None, "{:.2f} ms"),
)


def _pipeline(rows: Mapping[str, Any]) -> list[str]:
    trees = list(rows)
    out = ["| case | " + " | ".join(trees) + " | target |", "|---|" + "---|" * len(trees)
           + "---|"]
    for key, what, target, fmt in _PIPELINE:
        cells = [fmt.format(rows[t][key]) for t in trees]
        goal = "(measured)" if target is None else "≤ " + fmt.format(target)
        out.append(f"| {what} | " + " | ".join(cells) + f" | {goal} |")
    r = next(iter(rows.values()))
    return [*out, "", f"Every tree in the same run, side by side: 1 Hz runs of {r['seconds']} "
            f"s, idle {r['idle_seconds']} s (tests/bench/paired.py)."]


def _scrapers(rows: Mapping[str, Any]) -> list[str]:
    trees = list(dict.fromkeys(r["tree"] for r in rows.values()))
    scrapers = list(dict.fromkeys(r["scraper"] for r in rows.values()))
    head = "| scraper (tests/scrapers.py) | " + " | ".join(
        f"{t}: p50 / p99 | {t}: ratio to vmagent p50 / p99" for t in trees) + " |"
    out = [head, "|---|" + "---|---|" * len(trees)]
    for scraper in scrapers:
        cells = []
        for t in trees:
            r = rows.get(f"{t}/{scraper}")
            cells += (["", ""] if r is None else [
                f"{r['p50_ms']:.2f} ms / {r['p99_ms']:.2f} ms",
                f"{r['ratio_p50']:.2f}× / {r['ratio_p99']:.2f}×"])
        out.append(f"| {scraper} | " + " | ".join(cells) + " |")
    r = next(iter(rows.values()))
    return [*out, "", f"CPU of the whole exporter process per scrape, {r['gpus']} GPUs with "
            f"host metrics, {r['processes']} GPU process, {r['rounds']} rounds; every tree "
            "and scraper in the same run, alternating; target ≤ 1.15× vmagent's."]


def _footprint(r: Mapping[str, Any]) -> list[str]:
    curve = ", ".join(f"{n}: {rss / MIB:.1f}" for n, rss in r["rss_curve"])
    return [
        "| measure | value | target |",
        "|---|---|---|",
        f"| RSS after start | {r['rss_after_start'] / MIB:.1f} MiB | ≤ 60 MB without eBPF |",
        f"| RSS after the first scrape | {r['rss_after_first_scrape'] / MIB:.1f} MiB | |",
        f"| RSS after {r['scrapes']} scrapes | {r['rss_end'] / MIB:.1f} MiB | ≤ 60 MB |",
        f"| RSS growth over the second half of the scrapes | "
        f"{r['rss_growth_after_warmup'] / 1024:+.0f} KiB | "
        "no growth beyond noise |",
        f"| CPU per scrape | {r['cpu_seconds_per_scrape'] * 1000:.2f} ms | |",
        f"| CPU idle (between scrapes) | {r['idle_cpu_seconds_per_second'] * 1000:.2f} ms/s | |",
        f"| CPU per hour at a 15 s interval | {r['cpu_seconds_per_hour_at_15s']:.1f} s | |",
        f"| of which 240 scrapes | {r['cpu_seconds_per_scrape'] * 240:.1f} s | |",
        f"| of which idle time | {r['idle_cpu_seconds_per_second'] * 3600:.1f} s | |",
        f"| threads: start / peak / end | {r['threads_start']} / {r['threads_peak']} / "
        f"{r['threads_end']} | bounded |",
        f"| series per scrape | {r['series']} | |",
        "",
        f"RSS (MiB) by scrapes done: {curve}.",
    ]


def _imports(r: Mapping[str, Any]) -> list[str]:
    out = ["| imports (fresh interpreter, in this order) | resident memory added |",
           "|---|---|"]
    out += [f"| {name} | {added / MIB:.1f} MiB |" for name, added in r["added_bytes"]]
    out.append(f"| **total after importing the exporter (default path, without the \"only\" "
               f"rows)** | **{r['total'] / MIB:.1f} MiB** |")
    return out


def _peer(r: Mapping[str, Any]) -> list[str]:
    return [
        "| | p50 per scrape | p99 per scrape | CPU per scrape | series |",
        "|---|---|---|---|---|",
        f"| gpu-exporter (`--collector.amd` only) | {ms(r['ours_p50'])} | {ms(r['ours_p99'])} | "
        f"{r['ours_cpu_per_scrape'] * 1000:.2f} ms | {r['ours_device_series']} device series |",
        f"| node_exporter 1.5 `drm` | {ms(r['peer_p50'])} | {ms(r['peer_p99'])} | "
        f"{r['peer_cpu_per_scrape'] * 1000:.2f} ms | {r['peer_drm_series']} `node_drm_*` |",
        f"| ratio | {r['ratio_p50']:.2f}× | | {r['ratio_cpu']:.2f}× | |",
    ]


def _sysfs_readers(rows: Mapping[str, Any]) -> list[str]:
    out = ["| vendor | cards | files per read | reader p50 | reader p99 | floor p50 | "
           "floor p99 | ratio p50 | ratio p99 | target p99 ≤ 1.5× | rounds | other load |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows.values(), key=lambda r: r["vendor"]):
        met = "met" if r["ratio_p99"] <= 1.5 else "**not met**"
        out.append(
            f"| {r['vendor']} | {r['cards']} | {r['files']} (+{r['folders']} listed) | "
            f"{us(r['reader_p50'])} | {us(r['reader_p99'])} | {us(r['floor_p50'])} | "
            f"{us(r['floor_p99'])} | {r['ratio_p50']:.2f}× | {r['ratio_p99']:.2f}× | {met} | "
            f"{r['rounds']} | {max(0.0, r.get('other_load_cpus', float('nan'))):.2f} CPU |")
    return out


def _node_power_readers(rows: Mapping[str, Any]) -> list[str]:
    """Benchmark 7's table, and the held reads' own floor (one pread a file)."""
    out = _sysfs_readers(rows)
    held = [r for r in rows.values() if "pread_p50" in r]
    if held:
        out += ["", "| system calls of the held reads alone (one pread a file) p50 / p99 | "
                "reader against them p50 / p99 |", "|---|---|"]
        out += [f"| {us(r['pread_p50'])} / {us(r['pread_p99'])} | "
                f"{r['reader_p50'] / r['pread_p50']:.2f}× / "
                f"{r['reader_p99'] / r['pread_p99']:.2f}× |" for r in held]
    return out


def _render(rows: Mapping[str, Any]) -> list[str]:
    out = ["| format | GPUs | prometheus_client p50 / p99 "
           "| gpu_exporter/scrape/render.py p50 / p99 | ratio p50 |", "|---|---|---|---|---|"]
    for r in sorted(rows.values(), key=lambda r: (r.get("variant", "text"), r["gpus"])):
        out.append(f"| {r.get('variant', 'text')} | {r['gpus']} | "
                   f"{ms(r['library_p50'])} / {ms(r['library_p99'])} | "
                   f"{ms(r['ours_p50'])} / {ms(r['ours_p99'])} | "
                   f"{r['ours_p50'] / r['library_p50']:.2f}× |")
    return out


def _budget(rows: Mapping[str, Any]) -> list[str]:
    out = [
        "| node | GPUs | processes | device series per GPU | process series per process | "
        "host | self | series per node | bytes per scrape | 1,000 nodes: series | "
        "samples/s at 15 s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in sorted(rows.items()):
        s = r["by_scope"]
        out.append(
            f"| {name} | {r['gpus']} | {r['processes']} | {r['device_series_per_gpu']:.0f} | "
            f"{r['process_series_per_process']:.0f} | {s.get('host', 0)} | {s.get('self', 0)} | "
            f"{r['series_total']} | {r['exposition_bytes']:,} | {r['fleet_series']:,} | "
            f"{r['fleet_samples_per_second']:,.0f} |"
        )
    first = next(iter(sorted(rows.items())))[1]
    fams = sorted(first["by_family"].items(), key=lambda kv: -kv[1])
    out += ["", "Series by family on the 8-GPU node: "
            + ", ".join(f"`{k}` {v}" for k, v in fams) + "."]
    return out


def _summary(data: Mapping[str, Any]) -> list[str]:
    out = ["| # | benchmark | target | measured | |", "|---|---|---|---|---|"]

    def row(n: str, name: str, target: str, measured: str, met: bool | None) -> None:
        verdict = "n/a" if met is None else ("met" if met else "**not met**")
        out.append(f"| {n} | {name} | {target} | {measured} | {verdict} |")

    if "scrape_vs_floor" in data:
        rows = data["scrape_vs_floor"].values()
        worst = max(rows, key=lambda r: r["ratio_p99"])
        met = sum(1 for r in rows if r["ratio_p99"] <= 1.0)
        row("1", "scrape p99 vs floor", "≤ 1.0× (issue #26)",
            f"{met} of {len(rows)} cases; worst {worst['ratio_p99']:.2f}× "
            f"({worst['gpus']} GPUs, {worst['call_delay_us']} µs)", met == len(rows))
    for key, what in (("scaling_gpus", "GPUs"), ("scaling_series", "series")):
        if key in data:
            pts = list(data[key].values())
            r2 = linear_fit([p["x"] for p in pts], [p["median"] for p in pts])[2]
            row("2", f"scrape time vs {what}", "linear", f"R² = {r2:.4f}", r2 >= 0.95)
    eb = data.get("ebpf_overhead", {})
    for api in ("runtime", "driver"):
        ours, noop = eb.get(f"{api}/ours"), eb.get(f"{api}/noop_same_points")
        if ours and noop:
            ratio = ours["ns_per_call_median"] / noop["ns_per_call_median"]
            row("3", f"eBPF per {api} launch vs no-op probes on the same points", "≤ 1.15×",
                f"{ratio:.2f}× ({ours['ns_per_call_median']:.0f} vs "
                f"{noop['ns_per_call_median']:.0f} ns)", ratio <= 1.15)
    mem = data.get("ebpf_memory", {}).get("with_ebpf")
    if mem:
        rss = max(mem["rss_after_first_scrape"], mem["rss_after_scrapes"])
        row("3", "RSS with eBPF (bcc)", "≤ 160 MB",
            f"{rss / 1e6:.1f} MB ({mem['rss_anon_after_scrapes'] / 1e6:.1f} anonymous, "
            f"{mem['rss_file_after_scrapes'] / 1e6:.1f} files)", rss <= 160e6)
    if "footprint" in data:
        f = next(iter(data["footprint"].values()))
        peak = max(rss for _n, rss in f["rss_curve"] + [[0, f["rss_end"]]])
        row("4", "RSS without eBPF", "≤ 60 MB", f"{f['rss_after_start'] / 1e6:.1f} MB after "
            f"start, {peak / 1e6:.1f} MB peak over {f['scrapes']} scrapes", peak <= 60e6)
        growth = f["rss_growth_after_warmup"]
        row("4", "RSS growth over the scrapes", "no growth beyond noise",
            f"{growth / 1024:+.0f} KiB over the second half", abs(growth) <= MIB)
        row("4", "CPU at a 15 s interval", "(measured)",
            f"{f['cpu_seconds_per_hour_at_15s']:.1f} s per hour "
            f"({f['cpu_seconds_per_hour_at_15s'] / 36:.2f}% of one core)", None)
    if "host_node" in data:
        worst = max(data["host_node"].values(), key=lambda r: r["thread_cpu_ms_per_second"])
        row("9", "2 GPUs + host metrics at 1 Hz", "≤ 3 ms CPU/s (issue #26)",
            ", ".join(f"{r['thread_cpu_ms_per_second']:.2f} ms/s "
                      f"{'gzip' if r.get('gzip') else 'plain'}"
                      for r in data["host_node"].values()),
            worst["thread_cpu_ms_per_second"] <= 3)
    if "scrapers" in data:
        rows = [r for r in data["scrapers"].values() if r["tree"] == "this checkout"
                and r["scraper"] != "vmagent"]
        if rows:
            row("10", "Prometheus 2's and 3's negotiation vs vmagent's, CPU per scrape",
                "≤ 1.15× (issue #34)", ", ".join(
                    f"{r['scraper']} {r['ratio_p50']:.2f}×" for r in rows) + " (p50)",
                max(r["ratio_p50"] for r in rows) <= 1.15)
    if "pipeline" in data and "this checkout" in data["pipeline"]:
        r = data["pipeline"]["this checkout"]
        for key, what, target, fmt in _PIPELINE:
            if target is not None:
                row("11", what, "≤ " + fmt.format(target) + " (issue #34)",
                    fmt.format(r[key]), r[key] <= target)
    if "peer_drm" in data:
        p = next(iter(data["peer_drm"].values()))
        row("5", "AMD reader vs node_exporter drm", "(compared)",
            f"{p['ratio_p50']:.2f}× wall, {p['ratio_cpu']:.2f}× CPU per scrape", None)
    if "series_budget" in data:
        b = data["series_budget"].get("h100x8+200proc") or next(
            iter(data["series_budget"].values()))
        row("6", "series budget", "(counted)",
            f"{b['device_series_per_gpu']:.0f} per GPU, {b['series_total']} per node; "
            f"1,000 nodes: {b['fleet_series']:,} series, "
            f"{b['fleet_samples_per_second']:,.0f} samples/s", None)
    if "sysfs_readers" in data:
        rows = list(data["sysfs_readers"].values())
        worst = max(rows, key=lambda r: r["ratio_p99"])
        row("7", "AMD and Intel readers vs plain open/read of the same files", "≤ 1.5×",
            ", ".join(f"{r['vendor']} {r['ratio_p99']:.2f}×" for r in
                      sorted(rows, key=lambda r: r["vendor"])) + " (p99)",
            worst["ratio_p99"] <= 1.5)
    if "node_power_readers" in data:
        r = next(iter(data["node_power_readers"].values()))
        row("7b", "node power readers vs plain open/read of the same files", "≤ 1.5×",
            f"{r['ratio_p99']:.2f}× (p99)", r["ratio_p99"] <= 1.5)
    return out


def latest_runs(data: Mapping[str, Any]) -> dict[str, Any]:
    """Per benchmark, only the rows of its latest run (a curve or table mixes no runs)."""
    out: dict[str, Any] = {}
    for bench, rows in data.items():
        last = max((r.get("run", "") for r in rows.values()), default="")
        out[bench] = {k: r for k, r in rows.items() if r.get("run", "") == last}
    return out


def _earlier(block: str) -> dict[str, list[str]]:
    """The sections of an earlier generated block, by their `### ` title line."""
    sections: dict[str, list[str]] = {}
    lines: list[str] | None = None
    for line in block.splitlines():
        if line.startswith("### "):
            lines = sections[line] = []
        elif lines is not None:
            lines.append(line)
    for lines in sections.values():
        while lines and not lines[-1].strip():
            lines.pop()
    return sections


def _row_key(row: str) -> tuple[str, str]:
    cells = [c.strip() for c in row.strip("|").split("|")]
    return cells[0], cells[1]


def render(data: Mapping[str, Any], earlier: str = "") -> str:
    """The generated block. A benchmark not in `data` (a partial run: `make bench` runs
    them all, one file alone runs one) keeps its section and summary rows from the
    `earlier` block, with the date of the run they came from."""
    data = latest_runs(data)
    before = _earlier(earlier)
    summary = _summary(data)
    fresh = {_row_key(r) for r in summary[2:]}
    kept = [r for r in before.get("### Targets", []) if r.startswith("| ")
            and not r.startswith(("| # ", "|---")) and _row_key(r) not in fresh]
    # By number, then letter: 7b after 7, 10 after 9.
    rows = sorted(summary[2:] + kept, key=lambda r: (
        int("".join(c for c in _row_key(r)[0] if c.isdigit()) or 0), _row_key(r)[0]))
    parts: list[str] = [BEGIN, "", "### Targets", "", *summary[:2], *rows, ""]
    sections = [
        ("scrape_vs_floor", "### 1. Scrape cost against the floor",
         "`pytest tests/bench/test_scrape_cost.py --benchmark-only`", _scrape_vs_floor),
        ("breakdown", "### 1b. Where the scrape's time goes (8 GPUs, 200 processes, "
         "2,000 kernel series, 0 µs)",
         "`pytest tests/bench/test_scrape_cost.py -k breakdown --benchmark-only`",
         lambda r: _breakdown(next(iter(r.values())))),
        ("scaling_gpus", "### 2a. Scaling with GPUs (0 processes, 0 µs per call)",
         "`pytest tests/bench/test_scaling.py -k gpus --benchmark-only`",
         lambda r: _scaling(r, "GPUs")),
        ("scaling_series", "### 2b. Scaling with series (8 GPUs, 0 to 1,600 processes)",
         "`pytest tests/bench/test_scaling.py -k series --benchmark-only`",
         lambda r: _scaling(r, "series")),
        ("footprint", "### 4. Footprint of the exporter process (8 GPUs, 200 processes)",
         "`pytest tests/bench/test_footprint.py --benchmark-only`",
         lambda r: _footprint(next(iter(r.values())))),
        ("footprint_imports", "### 4b. Where the resident memory at start comes from",
         "`pytest tests/bench/test_footprint.py -k import --benchmark-only`",
         lambda r: _imports(r["steps"])),
        ("peer_drm", "### 5. Peer on the same data: AMD reader vs node_exporter `drm`",
         "`pytest tests/bench/test_peer_drm.py --benchmark-only`",
         lambda r: _peer(next(iter(r.values())))),
        ("series_budget", "### 6. Series budget", "`pytest tests/bench/test_series_budget.py "
         "--benchmark-only`", _budget),
        ("sysfs_readers", "### 7. AMD and Intel readers against plain reads of the same "
         "files", "`pytest tests/bench/test_sysfs_readers.py --benchmark-only`",
         _sysfs_readers),
        ("node_power_readers", "### 7b. Node power readers (ACPI meters, RAPL) against "
         "plain reads of the same files",
         "`pytest tests/bench/test_node_power_readers.py --benchmark-only`",
         _node_power_readers),
        ("render", "### 8. Text rendering: prometheus_client against the label-text cache "
         "(200 processes, 2,000 kernel series; thread CPU)",
         "`pytest tests/bench/test_render.py --benchmark-only`", _render),
        ("host_node", "### 9. A 2-GPU node with host metrics at 1 Hz (default collectors, "
         "1 GPU process, Prometheus 2's Accept header)",
         "`pytest tests/bench/test_host_node.py --benchmark-only`",
         _host_node),
        ("scrapers", "### 10. Scrapers' default negotiations: CPU per scrape against "
         "vmagent's (2 GPUs, host metrics, 1 GPU process)",
         "`GPU_EXPORTER_BENCH_BEFORE=DIR pytest tests/bench/test_scrapers.py "
         "--benchmark-only`", _scrapers),
        ("pipeline", "### 11. The scrape pipeline's targets (issue #34), before and after",
         "`GPU_EXPORTER_BENCH_BEFORE=DIR pytest tests/bench/test_pipeline.py "
         "--benchmark-only`", _pipeline),
    ]
    for key, title, command, table in sections:
        if not data.get(key) and before.get(title):
            parts += [title, *before[title], ""]
            continue
        parts += [title, "", f"Reproduce: {command} (then `python -m tests.bench.report`).", ""]
        if data.get(key):
            run = next(iter(data[key].values())).get("run", "")
            parts += [f"Run of {run}." if run else "", ""]
            parts += table(data[key])
        else:
            parts.append("_Not measured in the last run._")
        parts.append("")
    parts.append(END)
    return "\n".join(parts)


def update(doc: Path = DOC, results: Path = RESULTS) -> None:
    data = json.loads(results.read_text())
    text = doc.read_text() if doc.exists() else ""
    earlier = text.split(BEGIN, 1)[1].split(END, 1)[0] if BEGIN in text else ""
    block = render(data, earlier)
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    doc.write_text(text)


if __name__ == "__main__":
    update()
    sys.stdout.write(f"updated {DOC.relative_to(REPO)} from {RESULTS.relative_to(REPO)}\n")
