"""The rtnetlink link dump decoded by hand (gpu_exporter/readers/procfs/rtnetlink.py)
against the kernel's own counters of every interface in /sys/class/net, read before
and after the dump (a busy interface counts on in between; interfaces other tests add
or delete meanwhile are left out), and the exporter without
pyroute2 loaded."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

from gpu_exporter.readers.procfs import rtnetlink

NET = Path("/sys/class/net")
COUNTERS = ("rx_bytes", "tx_bytes", "rx_errors", "tx_errors")


def _sysfs() -> dict[str, tuple[int, ...]]:
    """ifindex and counters of every interface, as sysfs has them now; one that goes
    away while it is read (other tests make and delete veth pairs) is left out."""
    out = {}
    for path in NET.iterdir():
        with contextlib.suppress(OSError):
            out[path.name] = tuple(int((path / f).read_text()) for f in
                                   ("ifindex", *(f"statistics/{c}" for c in COUNTERS)))
    return out


def test_every_interface_and_its_counters_as_the_kernel_counts_them() -> None:
    before = _sysfs()
    dump = rtnetlink.LinkDump()
    try:
        links = {link.name: link for link in dump.links()}
        again = {link.name for link in dump.links()}  # the socket is kept: a second dump
    finally:
        dump.close()
    after = _sysfs()
    # The interfaces that were there all along (same ifindex before and after: not
    # deleted and made again by another test meanwhile).
    stable = {n for n in before.keys() & after.keys() if before[n][0] == after[n][0]}
    assert stable and stable <= links.keys(), (stable, sorted(links))
    assert stable <= again
    for name in stable:
        link = links[name]
        got = (link.receive_bytes, link.transmit_bytes, link.receive_errors,
               link.transmit_errors)
        for counter, low, value, high in zip(COUNTERS, before[name][1:], got, after[name][1:],
                                             strict=True):
            assert low <= value <= high, (name, counter, low, value, high)


def test_the_host_collector_does_not_load_pyroute2() -> None:
    # pyroute2 imports its whole library (22.5 MiB, 311 modules: docs/performance.md)
    code = ("import sys, re; from gpu_exporter.readers.procfs import host; "
            "n = host.NetlinkInterfaces(); n.read(re.compile('(?!)')); n.close(); "
            "print(any(m.split('.')[0] == 'pyroute2' for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "False", out
