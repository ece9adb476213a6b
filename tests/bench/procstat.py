"""What the kernel says about a process: resident memory, CPU time, threads."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any


def status_field(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def rss_bytes(pid: int) -> int:
    return status_field(pid, "VmRSS") * 1024


def threads(pid: int) -> int:
    return status_field(pid, "Threads")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the whole process (all threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


def system_busy_seconds() -> float:
    """CPU time all processes of the machine spent busy (every CPU), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def self_cpu_seconds() -> float:
    return cpu_seconds(os.getpid())


def pedantic_with_load(benchmark: Any, read: Callable[[], object], floor: Callable[[], object],
                       rounds: int) -> tuple[list[float], float]:
    """`read` timed by pytest-benchmark for `rounds` rounds, `floor` run before each (its
    setup), and the CPUs' worth of other processes' work meanwhile: what lands in the
    tails. Returns the rounds' times and that load."""
    busy0, own0, wall0 = system_busy_seconds(), self_cpu_seconds(), time.monotonic()
    benchmark.pedantic(read, setup=floor, rounds=rounds, iterations=1)
    other_load = ((system_busy_seconds() - busy0)
                  - (self_cpu_seconds() - own0)) / (time.monotonic() - wall0)
    return list(benchmark.stats.stats.data), other_load
