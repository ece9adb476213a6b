"""Resident memory of the real exporter with and without the eBPF collector, on the fake
8-GPU node of the footprint benchmark with a CUDA workload whose libraries are probed
(`make bench`, root). bcc brings clang and LLVM along: the collector compiles its
program at start, then gives the compiler's pages back (gpu_exporter/sources/ebpf/
compiler_pages.py). Target: <= 160 MB with the collector. Measured after the first
scrape and after 50 more, split into anonymous and file-backed pages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.bench import fleet, procstat
from tests.bench.conftest import Results
from tests.ebpf.conftest import Build, Workload, build_into, wait_attached
from tests.fake_nvml import scenario as fake
from tests.helpers import exporter, find, parse

SCRAPES = 50
CASES = {"without_ebpf": [], "with_ebpf": ["--collector.ebpf", "--ebpf.rescan-interval=1"]}


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    return build_into(tmp_path_factory.mktemp("bench-cuda-memory"))


def _rss(pid: int) -> dict[str, int]:
    return {"rss": procstat.rss_bytes(pid),
            "rss_anon": procstat.status_field(pid, "RssAnon") * 1024,
            "rss_file": procstat.status_field(pid, "RssFile") * 1024}


def test_resident_memory_with_bcc(benchmark: Any, results: Results, build: Build,
                                  tmp_path: Path) -> None:
    node = fleet.scenario(8, 200).write(tmp_path / "node.scenario")
    env = fake.env(fake.build(), node)
    work = Workload([build.path("workload"), "runtime", "1"])
    measured: dict[str, dict[str, Any]] = {}

    def run() -> None:
        for case, args in CASES.items():
            with exporter(args, env=env) as exp:
                if args:
                    wait_attached(exp, build.dir)
                series = parse(exp.scrape())
                first = _rss(exp.proc.pid)
                for _ in range(SCRAPES):
                    exp.scrape()
                after = _rss(exp.proc.pid)
                measured[case] = {
                    **{f"{k}_after_first_scrape": v for k, v in first.items()},
                    **{f"{k}_after_scrapes": v for k, v in after.items()},
                    "scrapes": SCRAPES,
                    "ebpf_enabled": bool(find(series, "gpu_exporter_collector_success",
                                              collector="ebpf")),
                }

    try:
        benchmark.pedantic(run, rounds=1, iterations=1)
    finally:
        work.go()
    assert measured["with_ebpf"]["ebpf_enabled"] and not measured["without_ebpf"]["ebpf_enabled"]
    for case, values in measured.items():
        results.put("ebpf_memory", case, values)
        benchmark.extra_info[case] = values
        print(f"\n{case:14} RSS {values['rss_after_scrapes'] / 1e6:.1f} MB after "
              f"{SCRAPES + 1} scrapes (anonymous {values['rss_anon_after_scrapes'] / 1e6:.1f},"
              f" files {values['rss_file_after_scrapes'] / 1e6:.1f})")
