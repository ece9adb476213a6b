"""What counting the samples derived in Python costs the event loop's thread (issue #34):
gpu_exporter/sources/ebpf/durations.py of each source tree given, fed the same records
(closed groups of 1 to 4 kernels, stream waits, elapsed times) round by round, each tree
in turn; thread CPU per record. A tree whose Durations writes into the kernel's `stats`
map (before issue #34) gets a real one, from bcc (root), laid out as program.c's.

    python -m tests.bench.durations_cost ROUNDS name=tree ...

A tree is a folder holding a `gpu_exporter` package (`git archive <commit> gpu_exporter |
tar -x -C DIR`).
"""

from __future__ import annotations

import importlib.util
import inspect
import random
import struct
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from gpu_exporter.model import ebpf_abi as abi
from tests.bench.stats import percentile

_MAP = r"""
struct skey { u32 tgid; u16 fam; u16 sub; u64 id; u32 slot; u32 dev; };
BPF_HASH(stats, struct skey, u64, STATS_MAX);
"""
EVENT = struct.Struct(f"<IIHHIQQ{2 * abi.GROUP_KERNELS + 1}Q")
WAIT = struct.Struct("<IIHHIQQ")


def records(n: int, seed: int = 34) -> list[bytes]:
    """`n` records as the program sends them: 8 processes, 50 kernels each, bounds and
    times spread over 1 µs .. 100 ms."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        tgid, dev = 5_000_000 + rng.randrange(8), 1 + rng.randrange(2)
        ns = int(10 ** rng.uniform(3, 8))
        kind = rng.random()
        if kind < 0.6:
            k = rng.randint(1, abi.GROUP_KERNELS)
            tags = [(0x1000 + rng.randrange(50)) | (abi.API_DRIVER + 1) << 48 for _ in range(k)]
            counts = [rng.randint(1, 20) for _ in range(k)]
            pad = [0] * (abi.GROUP_KERNELS - k)
            out.append(EVENT.pack(abi.EV_DURATIONS, tgid, abi.COMPLETION_EVENT, 0, dev, ns, 0,
                                  *tags, *pad, *counts, *pad, 0))
        elif kind < 0.8:
            out.append(WAIT.pack(abi.EV_WAIT, tgid, rng.random() < 0.5, 0, dev, ns, 0))
        else:
            (bits,) = struct.unpack("<I", struct.pack("<f", ns / 1e6))
            out.append(WAIT.pack(abi.EV_ELAPSED, tgid, abi.API_DRIVER, 0, dev,
                                 0x1000 + rng.randrange(50), bits))
    return out


def _module(tree: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"durations_{name}", f"{tree}/gpu_exporter/sources/ebpf/durations.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def counter(tree: str, name: str) -> Callable[[bytes], None]:
    """The tree's handler of one record."""
    durations = _module(tree, name).Durations()
    takes_map = "bpf" in inspect.signature(durations.on_event).parameters
    bpf: Any = None
    if takes_map:  # before issue #34: a real `stats` map, written by system calls
        import bcc  # type: ignore[import-not-found]

        bpf = bcc.BPF(text=_MAP, cflags=[f"-DSTATS_MAX={abi.STATS_MAX}"])
    by_type = {abi.EV_DURATIONS: durations.on_event, abi.EV_WAIT: durations.on_wait,
               abi.EV_ELAPSED: durations.on_elapsed}

    def one(raw: bytes) -> None:
        handler = by_type[struct.unpack_from("<I", raw)[0]]
        if takes_map:
            handler(bpf, raw)
        else:
            handler(raw)
    return one


def measure(rounds: int, trees: Sequence[tuple[str, str]], per_round: int = 200,
            ) -> dict[str, list[float]]:
    """µs of thread CPU per record, by tree: each round `per_round` records, every tree
    in turn (the order reversed every round)."""
    sides = [(name, counter(tree, name)) for name, tree in trees]
    feed = records(rounds * per_round)
    out: dict[str, list[float]] = {name: [] for name, _ in trees}
    for i in range(rounds):
        batch = feed[i * per_round:(i + 1) * per_round]
        for name, one in (sides if i % 2 == 0 else sides[::-1]):
            t0 = time.thread_time()
            for raw in batch:
                one(raw)
            out[name].append((time.thread_time() - t0) / per_round * 1e6)
    return out


def main(argv: Sequence[str]) -> None:
    rounds = int(argv[0])
    trees = [(a.split("=", 1)[0], a.split("=", 1)[1]) for a in argv[1:]]
    results = measure(rounds, trees)
    base = percentile(next(iter(results.values())), 50)
    for name, values in results.items():
        p50 = percentile(values, 50)
        print(f"Python-derived eBPF samples, {name}: p50 {p50:.2f} µs, p99 "
              f"{percentile(values, 99):.2f} µs of thread CPU per record, ratio to "
              f"{next(iter(results))} p50 {p50 / base:.2f} ({len(values)} rounds)")


if __name__ == "__main__":
    main(sys.argv[1:])
