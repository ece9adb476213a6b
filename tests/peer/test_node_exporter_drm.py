"""Side by side with a peer: node_exporter's `drm` collector (Debian
`prometheus-node-exporter` 1.5) and ours on the same fake /sys trees.

Where both read a card they must agree (busy ratio, VRAM used and total). Every
disagreement the peer has is written down as an assertion:
- on the RX 6900 XT capture node_exporter panics (nil pointer dereference) and exits:
  that capture's files are NUL-padded to 4096 bytes, and one padded file is enough;
- it reads Intel cards as `vendor="amd"` with `gpu_busy_percent 0` and 0 bytes of VRAM
  (we report them as Intel with those values absent);
- it reads a missing `mem_info_vram_used` as 0 (we leave it absent);
- it globs `card[0-9]` and never sees `card12` (we do)."""

from __future__ import annotations

import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import (
    Series,
    find,
    free_port,
    parse,
    require_tool,
    stop_process,
    value,
    wait_started,
)
from tests.sysfs.conftest import dump
from tests.sysfs.tree import FakeSysfs

NODE_EXPORTER = "prometheus-node-exporter"


class Peer:
    def __init__(self, proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.proc, self.url, self.log = proc, url, log

    def scrape(self) -> list[Series]:
        with urllib.request.urlopen(self.url, timeout=10) as r:
            return parse(r.read().decode())


@contextmanager
def node_exporter(sysfs: Path) -> Iterator[Peer]:
    binary = require_tool(NODE_EXPORTER)
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "node_exporter.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [binary, "--collector.disable-defaults", "--collector.drm",
                 f"--path.sysfs={sysfs}", f"--web.listen-address=127.0.0.1:{port}"],
                stdout=out, stderr=subprocess.STDOUT)
        peer = Peer(proc, f"http://127.0.0.1:{port}/metrics", log)

        def logs() -> str:
            return log.read_text(errors="replace")

        try:
            wait_started(proc, lambda: "Listening on" in logs(), logs, "node_exporter", 15)
            yield peer
        finally:
            stop_process(proc)


def peer_card(series: list[Series], card: str) -> dict[str, float]:
    return {s.name: s.value for s in series
            if s.labels.get("card") == card and s.name.startswith("node_drm_")}


def ours(series: list[Series], address: str) -> dict[str, float]:
    out = {s.name: s.value for s in series
           if s.labels.get("gpu_pci_address") == address and s.name.startswith("hw_gpu_")
           and s.labels.get("hw_gpu_task", "general") == "general"}
    return out


@pytest.mark.parametrize("busy", [None, b"37\n"])
def test_agree_on_amd_cards_the_peer_reads(sysfs: FakeSysfs, procfs: Path,
                                           busy: bytes | None) -> None:
    cards = {"card0": sysfs.add("vega56", "0000:0b:00.0", 0),
             "card1": sysfs.add("phoenix", "0000:64:00.0", 1)}
    if busy is not None:
        for card in cards.values():
            (card.device / "gpu_busy_percent").write_bytes(busy)
    with node_exporter(sysfs.root) as peer:
        theirs = peer.scrape()
    _, mine = dump(sysfs.root, procfs)
    assert value(theirs, "node_scrape_collector_success", collector="drm") == 1
    for name, card in cards.items():
        p, o = peer_card(theirs, name), ours(mine, card.address)
        assert p, f"node_exporter did not read {name}"
        assert o["hw_gpu_utilization_ratio"] == pytest.approx(
            p["node_drm_gpu_busy_percent"] / 100)
        assert o["hw_gpu_memory_usage_bytes"] == p["node_drm_memory_vram_used_bytes"]
        assert o["hw_gpu_memory_limit_bytes"] == p["node_drm_memory_vram_size_bytes"]
        if busy is not None:
            assert o["hw_gpu_utilization_ratio"] == pytest.approx(0.37)


def test_peer_panics_on_nul_padding_we_read_it(sysfs: FakeSysfs, procfs: Path) -> None:
    card = sysfs.add("vega56", "0000:0b:00.0", 0)
    (card.device / "gpu_busy_percent").write_bytes(b"37\n" + b"\0" * 4093)
    with node_exporter(sysfs.root) as peer:
        with pytest.raises(OSError):
            peer.scrape()
        peer.proc.wait(10)
        assert "panic: runtime error" in peer.log.read_text(errors="replace")
    _, mine = dump(sysfs.root, procfs)
    assert value(mine, "hw_gpu_utilization_ratio", gpu_pci_address=card.address) == 0.37


def test_peer_panics_on_rx6900xt_we_read_it(sysfs: FakeSysfs, procfs: Path) -> None:
    sysfs.add("rx6900xt", "0000:0c:00.0", 0)
    with node_exporter(sysfs.root) as peer:
        with pytest.raises(OSError):  # the connection dies with the process
            peer.scrape()
        peer.proc.wait(10)
        assert peer.proc.returncode != 0
        assert "panic: runtime error" in peer.log.read_text(errors="replace")
    _, mine = dump(sysfs.root, procfs)
    o = ours(mine, "0000:0c:00.0")
    assert o["hw_gpu_up"] == 1
    assert o["hw_gpu_memory_usage_bytes"] == 668274688
    assert o["hw_gpu_memory_limit_bytes"] == 17163091968
    assert o["hw_gpu_utilization_ratio"] == pytest.approx(0.03)


@pytest.mark.parametrize("capture", ["a380", "b580"])
def test_peer_reads_intel_as_zero_we_report_absent(sysfs: FakeSysfs, procfs: Path,
                                                   capture: str) -> None:
    sysfs.add(capture, "0000:03:00.0", 0)
    with node_exporter(sysfs.root) as peer:
        theirs = peer.scrape()
    p = peer_card(theirs, "card0")
    info = find(theirs, "node_drm_card_info", card="card0")
    assert info[0].labels["vendor"] == "amd"  # an Intel card, named AMD
    assert p["node_drm_gpu_busy_percent"] == 0
    assert p["node_drm_memory_vram_used_bytes"] == 0
    assert p["node_drm_memory_vram_size_bytes"] == 0
    _, mine = dump(sysfs.root, procfs)
    o = ours(mine, "0000:03:00.0")
    assert value(mine, "hw_gpu_up", gpu_pci_address="0000:03:00.0", hw_vendor="intel") == 1
    # no fdinfo client, no VRAM files: nothing measured, nothing reported
    assert "hw_gpu_utilization_ratio" not in o
    assert "hw_gpu_memory_usage_bytes" not in o
    assert "hw_gpu_memory_limit_bytes" not in o


def test_missing_file_peer_says_zero_we_say_absent(sysfs: FakeSysfs, procfs: Path) -> None:
    card = sysfs.add("vega56", "0000:0b:00.0", 0)
    (card.device / "mem_info_vram_used").unlink()
    with node_exporter(sysfs.root) as peer:
        p = peer_card(peer.scrape(), "card0")
    assert p["node_drm_memory_vram_used_bytes"] == 0
    _, mine = dump(sysfs.root, procfs)
    o = ours(mine, card.address)
    assert "hw_gpu_memory_usage_bytes" not in o
    assert o["hw_gpu_memory_limit_bytes"] == p["node_drm_memory_vram_size_bytes"]


def test_card12_peer_misses_it_we_read_it(sysfs: FakeSysfs, procfs: Path) -> None:
    sysfs.add("vega56", "0000:0b:00.0", 12)
    sysfs.add("phoenix", "0000:64:00.0", 1)
    with node_exporter(sysfs.root) as peer:
        theirs = peer.scrape()
    assert peer_card(theirs, "card1")
    assert not peer_card(theirs, "card12")
    _, mine = dump(sysfs.root, procfs)
    assert value(mine, "hw_gpu_up", gpu_pci_address="0000:0b:00.0") == 1
    assert value(mine, "hw_gpu_memory_limit_bytes", gpu_pci_address="0000:0b:00.0") == (
        8573157376)
