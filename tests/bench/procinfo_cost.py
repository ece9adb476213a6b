"""The process-facts cache of gpu_exporter/readers/procfs/procinfo.py (issue #34): a /proc
tree of PROCESSES GPU processes, each in a Kubernetes pod's container, looked up once a
scrape for SCRAPES scrapes with CHURN of them replaced by new processes every scrape;
the cache's hit rate, its memory (tracemalloc, the entries alone), and the CPU per scrape
of a cached lookup round against one that reads every process afresh (the same table
with no room to cache), alternating.

    python -m tests.bench.procinfo_cost PROCESSES SCRAPES CHURN
"""

from __future__ import annotations

import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from gpu_exporter.readers.procfs.procinfo import ProcessTable
from tests.bench.stats import percentile

_CID = "0123456789abcdef" * 4
_UID = "12345678_1234_1234_1234_123456789abc"


def write(root: Path, pid: int, start: int) -> None:
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "comm").write_text(f"trainer-{pid % 7}\n")
    (d / "cgroup").write_text(f"0::/kubepods.slice/kubepods-besteffort.slice/"
                              f"kubepods-besteffort-pod{_UID}.slice/"
                              f"cri-containerd-{_CID[:-6]}{pid:06d}.scope\n")
    middle = " ".join(["S"] + [str(i) for i in range(4, 22)])
    (d / "stat").write_text(f"{pid} (trainer) {middle} {start} 1 2\n")


def main(processes: int, scrapes: int, churn: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pids = list(range(10_000, 10_000 + processes))
        for pid in pids:
            write(root, pid, start=1)
        cached, cold = ProcessTable(tmp), ProcessTable(tmp, max_entries=0)
        times: dict[str, list[float]] = {"cached": [], "read afresh": []}
        for i in range(scrapes):
            for j in range(churn):  # processes replaced: same pid, new start time
                write(root, pids[(i * churn + j) % processes], start=2 + i)
            sides = [("cached", cached), ("read afresh", cold)]
            for name, table in (sides if i % 2 == 0 else sides[::-1]):
                t0 = time.thread_time()
                assert len(table.lookup_many(pids)) == processes
                table.prune()
                times[name].append((time.thread_time() - t0) * 1000)
        tracemalloc.start()
        fresh = ProcessTable(tmp)
        before = tracemalloc.take_snapshot()
        fresh.lookup_many(pids)
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        held = sum(s.size_diff for s in after.compare_to(before, "filename"))
    looked = cached.hits + cached.misses
    print(f"{processes} processes, {scrapes} scrapes, {churn} replaced a scrape: hit rate "
          f"{cached.hits / looked:.3f} ({cached.hits} of {looked}); cache "
          f"{len(fresh)} entries, {held / 1024:.0f} KiB ({held / len(fresh):.0f} B each)")
    for name, values in times.items():
        print(f"  {name}: p50 {percentile(values, 50):.2f} ms, p99 "
              f"{percentile(values, 99):.2f} ms of thread CPU per scrape")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]))
