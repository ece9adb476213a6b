"""The rtnetlink link dump decoded by hand (gpu_exporter/sources/procfs/rtnetlink.py)
against the kernel's own counters of every interface in /sys/class/net, read before
and after the dump (a busy interface counts on in between), and the exporter without
pyroute2 loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpu_exporter.sources.procfs import rtnetlink

NET = Path("/sys/class/net")
COUNTERS = ("rx_bytes", "tx_bytes", "rx_errors", "tx_errors")


def _sysfs(name: str) -> tuple[int, ...]:
    return tuple(int((NET / name / "statistics" / c).read_text()) for c in COUNTERS)


def test_every_interface_and_its_counters_as_the_kernel_counts_them() -> None:
    names = sorted(p.name for p in NET.iterdir())
    before = {n: _sysfs(n) for n in names}
    dump = rtnetlink.LinkDump()
    try:
        links = dump.links()
        again = dump.links()  # the socket is kept: a second dump on it
    finally:
        dump.close()
    after = {n: _sysfs(n) for n in names}
    assert sorted(link.name for link in links) == names
    assert sorted(link.name for link in again) == names
    for link in links:
        got = (link.receive_bytes, link.transmit_bytes, link.receive_errors,
               link.transmit_errors)
        for counter, low, value, high in zip(COUNTERS, before[link.name], got,
                                             after[link.name], strict=True):
            assert low <= value <= high, (link.name, counter, low, value, high)


def test_the_host_collector_does_not_load_pyroute2() -> None:
    # pyroute2 imports its whole library (22.5 MiB, 311 modules: docs/performance.md)
    code = ("import sys, re; from gpu_exporter.sources.procfs import host; "
            "n = host.NetlinkInterfaces(); n.read(re.compile('(?!)')); n.close(); "
            "print(any(m.split('.')[0] == 'pyroute2' for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "False", out
