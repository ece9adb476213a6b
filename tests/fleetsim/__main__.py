"""python -m tests.fleetsim: run the fleet simulation and print its table (tests/fleetsim/sim.py).

    python -m tests.fleetsim                        # 16 (exporters), 64, 128 nodes (replay)
    python -m tests.fleetsim --rules 'my-rules/*.yml' --rules 'alerts/*.yml'
    python -m tests.fleetsim --sizes 4,16 --window 30 --json build/fleetsim.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.fleetsim.sim import Config, run, table, to_json

MAX_NODES = 2000
MAX_REAL = 64


def main(argv: list[str]) -> int:
    d = Config()
    ap = argparse.ArgumentParser(prog="python -m tests.fleetsim", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=",".join(map(str, d.sizes)),
                    help="node counts, comma-separated (8 GPUs per node)")
    ap.add_argument("--real", type=int, default=d.real,
                    help="up to this many nodes run real exporters; more: the replay target")
    ap.add_argument("--shards", type=int, default=d.shards, help="vmagent shards")
    ap.add_argument("--replication", type=int, default=d.replication,
                    help="vmagent replicationFactor (2: VictoriaMetrics deduplicates)")
    ap.add_argument("--interval", type=float, default=d.interval,
                    help="scrape and rule evaluation interval, seconds")
    ap.add_argument("--window", type=float, default=d.window, help="measured seconds per size")
    ap.add_argument("--jitter", type=float, default=d.jitter,
                    help="clocks, power, utilization drawn within ±this share of their base")
    ap.add_argument("--rules", action="append", default=None,
                    help="rule file glob, repeatable (default: alerts/*.yml)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",") if s]
    # Bounded: one loopback port per replayed node, one exporter process per real one.
    if (not sizes or min(sizes) < 1 or max(sizes) > MAX_NODES or not 0 <= a.real <= MAX_REAL
            or a.shards < 1 or not 1 <= a.replication <= a.shards or a.window <= 0
            or a.interval <= 0):
        print(f"fleetsim: --sizes must be node counts from 1 to {MAX_NODES}, --real 0 to "
              f"{MAX_REAL}, 1 <= --replication <= --shards, --window and --interval above 0",
              file=sys.stderr)
        return 2
    cfg = Config(sizes=sizes, real=a.real, shards=a.shards, replication=a.replication,
                 interval=a.interval, window=a.window, jitter=a.jitter,
                 rules=a.rules or d.rules)
    results = run(cfg)
    print(table(results, cfg))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(to_json(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
