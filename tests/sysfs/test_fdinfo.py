"""The DRM fdinfo walker on fake /proc trees laid out like the kernel's, and Intel engine
utilization through the running exporter."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from gpu_exporter.collectors import REGISTRY
from gpu_exporter.collectors.base import Sink
from gpu_exporter.collectors.inputs import ScrapeInputs
from gpu_exporter.readers.procfs import fdinfo as fdinfo_mod
from gpu_exporter.readers.procfs.fdinfo import (
    EngineUsage,
    device_utilization,
    engine_task,
    parse_fdinfo,
    read_drm_clients,
)
from tests.helpers import exporter, find, parse, run_cli, value
from tests.processes.procfs import write_process
from tests.sysfs.conftest import only_sysfs_collectors
from tests.sysfs.tree import FakeSysfs

I915 = """pos:\t0
flags:\t02100002
mnt_id:\t26
ino:\t1103
drm-driver:\ti915
drm-client-id:\t{cid}
drm-pdev:\t0000:03:00.0
drm-total-system0:\t4 KiB
drm-resident-local0:\t{local} KiB
drm-engine-render:\t{render} ns
drm-engine-copy:\t0 ns
drm-engine-video:\t{video} ns
drm-engine-capacity-video:\t2
drm-engine-video-enhance:\t0 ns
"""

XE = """pos:\t0
flags:\t0100002
drm-driver:\txe
drm-client-id:\t{cid}
drm-pdev:\t0000:09:00.0
drm-total-vram0:\t8192 KiB
drm-resident-vram0:\t{vram} KiB
drm-cycles-rcs:\t{rcs}
drm-total-cycles-rcs:\t{total}
drm-cycles-bcs:\t0
drm-total-cycles-bcs:\t{total}
drm-cycles-vcs:\t{vcs}
drm-total-cycles-vcs:\t{total}
drm-engine-capacity-vcs:\t2
"""

AMDGPU = """pos:\t0
drm-driver:\tamdgpu
drm-client-id:\t{cid}
drm-pdev:\t0000:0C:00.0
pasid:\t32771
drm-memory-vram:\t{vram} KiB
drm-memory-gtt:\t2048 KiB
drm-engine-gfx:\t{gfx} ns
drm-engine-dec:\t100 ns
"""


def add_fd(procfs: Path, pid: int, fd: int, text: str, target: str = "/dev/dri/renderD128"
           ) -> None:
    d = procfs / str(pid)
    (d / "fd").mkdir(parents=True, exist_ok=True)
    (d / "fdinfo").mkdir(exist_ok=True)
    link = d / "fd" / str(fd)
    if link.is_symlink():
        link.unlink()
    os.symlink(target, link)
    (d / "fdinfo" / str(fd)).write_text(text)


def test_walk_dedups_by_client_id(procfs: Path) -> None:
    # pid 10 opens the card; pid 11 was forked from it and shares the same DRM file
    # (same client id) on another fd; pid 12 has its own file.
    add_fd(procfs, 10, 5, I915.format(cid=7, local=1024, render=1000, video=10))
    add_fd(procfs, 10, 9, I915.format(cid=7, local=1024, render=1000, video=10))
    add_fd(procfs, 11, 3, I915.format(cid=7, local=1024, render=1000, video=10))
    add_fd(procfs, 12, 4, XE.format(cid=3, vram=2048, rcs=5, total=100, vcs=1))
    add_fd(procfs, 13, 4, AMDGPU.format(cid=1, vram=512, gfx=77))
    # not DRM: a file whose fdinfo happens to look like one is never opened
    add_fd(procfs, 14, 1, I915.format(cid=99, local=1, render=1, video=1), target="/tmp/x")
    (procfs / "self").mkdir()  # not a pid
    clients = read_drm_clients(str(procfs))
    assert [(c.pci_address, c.client_id, c.pids) for c in clients] == [
        ("0000:03:00.0", 7, (10, 11)),
        ("0000:09:00.0", 3, (12,)),
        ("0000:0c:00.0", 1, (13,)),
    ]
    i915, xe, amd = clients
    assert i915.pid == 10
    assert i915.driver == "i915"
    assert i915.vram_bytes == 1024 * 1024  # drm-resident-local0, KiB
    assert i915.engine_busy_ns == {"render": 1000, "copy": 0, "video": 10,
                                   "video-enhance": 0}
    assert i915.engine_capacity == {"video": 2}
    assert xe.vram_bytes == 2048 * 1024
    assert xe.engine_cycles == {"rcs": 5, "bcs": 0, "vcs": 1}
    assert xe.engine_total_cycles == {"rcs": 100, "bcs": 100, "vcs": 100}
    assert amd.vram_bytes == 512 * 1024  # the older drm-memory-vram
    assert amd.engine_busy_ns == {"gfx": 77, "dec": 100}
    assert [c.client_id for c in read_drm_clients(str(procfs), ["amdgpu"])] == [1]


def test_unreadable_and_vanishing_entries_are_skipped(procfs: Path) -> None:
    add_fd(procfs, 20, 5, I915.format(cid=1, local=0, render=0, video=0))
    os.symlink("/dev/dri/card0", procfs / "20" / "fd" / "6")  # fdinfo/6 is gone already
    (procfs / "21").mkdir()  # a process without fd/ (exited, or not ours to read)
    assert [c.client_id for c in read_drm_clients(str(procfs))] == [1]
    assert read_drm_clients(str(procfs / "missing")) == []


@pytest.mark.parametrize("text", [
    "drm-driver:\ti915\ndrm-client-id:\t1\n",  # no drm-pdev
    "drm-driver:\ti915\ndrm-pdev:\t0000:03:00.0\n",  # no client id
    "drm-driver:\tnouveau\ndrm-client-id:\t1\ndrm-pdev:\t0000:03:00.0\n",  # not ours
    "drm-driver:\ti915\ndrm-client-id:\t-1\ndrm-pdev:\t0000:03:00.0\n",
    "drm-driver:\ti915\ndrm-client-id:\t1\ndrm-pdev:\tnot-an-address\n",
    "",
])
def test_not_a_client(text: str) -> None:
    assert parse_fdinfo(text, 1) is None


def test_bad_values_are_absent_not_zero() -> None:
    c = parse_fdinfo(
        "drm-driver:\tamdgpu\ndrm-client-id:\t4\ndrm-pdev:\t0000:0c:00.0\n"
        "drm-engine-gfx:\tlots ns\ndrm-engine-compute:\t-5 ns\ndrm-engine-dec:\t12 ns\n"
        "drm-memory-vram:\t10 parsecs\n", 1)
    assert c is not None
    assert c.engine_busy_ns == {"dec": 12}
    assert c.vram_bytes is None


def test_engine_ratios_between_walks() -> None:
    def i915(render: int, video: int, at: int, cid: int = 7) -> object:
        return parse_fdinfo(I915.format(cid=cid, local=0, render=render, video=video),
                            100, read_ns=at)

    usage = EngineUsage()
    assert usage.update([i915(0, 0, at=0)]) == []  # first walk: no interval yet
    second = usage.update([i915(250_000_000, 1_000_000_000, at=1_000_000_000),
                           i915(5, 5, at=1_000_000_000, cid=8)])  # cid 8: new, no ratio
    assert len(second) == 1
    # render: 0.25 s of 1 s; video: 1 s over 2 engines of 1 s each = 0.5
    assert second[0].engine_ratio["render"] == pytest.approx(0.25)
    assert second[0].engine_ratio["video"] == pytest.approx(0.5)
    assert second[0].utilization_ratio == pytest.approx({"general": 0.25, "decoder": 0.5})


def test_device_sum_over_clients_and_clamp() -> None:
    def xe(cid: int, rcs: int, vcs: int, total: int) -> object:
        return parse_fdinfo(XE.format(cid=cid, vram=0, rcs=rcs, vcs=vcs, total=total), cid)

    usage = EngineUsage()
    usage.update([xe(1, 0, 0, 1000), xe(2, 0, 0, 5000)])
    # client 1: 300/1000 rcs; client 2: 500/1000 rcs, 1000/1000 over 2 vcs engines
    out = usage.update([xe(1, 300, 0, 2000), xe(2, 500, 1000, 6000)])
    per_device = device_utilization(out)
    assert per_device == {"0000:09:00.0": pytest.approx({"general": 0.8, "decoder": 0.5})}
    # overlapping clients cannot make an engine more than fully busy
    out = usage.update([xe(1, 1300, 0, 3000), xe(2, 1500, 1000, 7000)])
    assert device_utilization(out)["0000:09:00.0"]["general"] == 1.0


def test_engine_task_mapping() -> None:
    assert engine_task("i915", "render") == "general"
    assert engine_task("i915", "video") == "decoder"
    assert engine_task("i915", "copy") is None
    assert engine_task("xe", "ccs") == "general"
    assert engine_task("xe", "vecs") is None
    assert engine_task("amdgpu", "enc") == "encoder"
    assert engine_task("amdgpu", "jpeg") == "decoder"


def test_intel_utilization_through_the_exporter(sysfs: FakeSysfs, procfs: Path) -> None:
    """xe cycle counters carry their own time base, so the ratio is exact whatever the
    scrape timing: (rcs 600 + 200) / 1000 and vcs 400 / (1000 x 2 engines)."""
    sysfs.add("b580", "0000:09:00.0", 1)
    add_fd(procfs, 30, 4, XE.format(cid=1, vram=0, rcs=0, vcs=0, total=10_000))
    add_fd(procfs, 31, 4, XE.format(cid=2, vram=0, rcs=0, vcs=0, total=10_000))
    with exporter(only_sysfs_collectors(sysfs.root, procfs)) as exp:
        s = parse(exp.scrape())
        assert not find(s, "hw_gpu_utilization_ratio")  # first walk: nothing measured
        add_fd(procfs, 30, 4, XE.format(cid=1, vram=0, rcs=600, vcs=400, total=11_000))
        add_fd(procfs, 31, 4, XE.format(cid=2, vram=0, rcs=200, vcs=0, total=11_000))
        s = parse(exp.scrape())
        assert value(s, "hw_gpu_utilization_ratio", hw_gpu_task="general",
                     gpu_pci_address="0000:09:00.0") == pytest.approx(0.8)
        assert value(s, "hw_gpu_utilization_ratio", hw_gpu_task="decoder",
                     gpu_pci_address="0000:09:00.0") == pytest.approx(0.2)
        assert value(s, "gpu_exporter_collector_success", collector="intel") == 1


def test_process_families_join_the_intel_card(sysfs: FakeSysfs, procfs: Path) -> None:
    """The processes collector (another area) emits process_gpu_* from this walker; its
    samples name the device by drm-pdev and get this collector's device labels."""
    sysfs.add("b580", "0000:09:00.0", 1)
    write_process(procfs, 4242, comm="ffmpeg")
    add_fd(procfs, 4242, 7, XE.format(cid=5, vram=2048, rcs=10, vcs=0, total=1000))
    off = [f"--no-collector.{c.name}" for c in REGISTRY if c.name not in ("intel", "processes")]
    res = run_cli(["dump", *off, f"--path.sysfs={sysfs.root}", f"--path.procfs={procfs}"])
    assert res.returncode == 0, res.stderr
    [mem] = find(parse(res.stdout), "process_gpu_memory_usage_bytes", process_pid="4242")
    assert mem.value == 2048 * 1024
    assert mem.labels.items() >= {"hw_vendor": "intel", "hw_id": "0000:09:00.0",
                                  "gpu_pci_address": "0000:09:00.0", "gpu_index": "0",
                                  "process_executable_name": "ffmpeg"}.items()


def test_one_walk_per_scrape_shared_by_its_collectors(tmp_path: Path) -> None:
    procfs = tmp_path / "proc"
    write_process(procfs, 10, comm="a", fdinfo={3: I915.format(cid=1, local=4, render=5,
                                                                  video=0)})
    deadline = time.monotonic() + 10
    scrape = ScrapeInputs()  # what the exporter hands every collector of one scrape
    first = Sink("intel", deadline, inputs=scrape).inputs.drm_clients(str(procfs), deadline)
    assert [c.client_id for c in first] == [1]
    # A second collector of the same scrape gets that walk, not a new one.
    write_process(procfs, 11, comm="b", fdinfo={3: I915.format(cid=2, local=4, render=5,
                                                                  video=0)})
    results: list[list[int]] = []
    t = threading.Thread(target=lambda: results.append(
        [c.client_id for c in Sink("processes", deadline, inputs=scrape).inputs.drm_clients(
            str(procfs), deadline)]))
    t.start()
    t.join(10)
    assert results == [[1]]
    # The next scrape walks again.
    assert [c.client_id for c in ScrapeInputs().drm_clients(str(procfs), deadline)] == [1, 2]
    # A walk past its deadline fails every caller of that scrape.
    late = ScrapeInputs()
    for _ in ("intel", "processes"):
        with pytest.raises(TimeoutError):
            late.drm_clients(str(procfs), time.monotonic() - 1)


def test_a_collector_waits_for_the_scrapes_walk_only_until_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ScrapeInputs: the second collector to ask waits for the first one's walk, never
    past its own deadline, and then shares that walk's result."""
    inside, release = threading.Event(), threading.Event()
    walks: list[str] = []

    def walk(procfs: str, deadline: float | None = None) -> list[fdinfo_mod.DrmClient]:
        walks.append(procfs)
        inside.set()
        release.wait(10)
        return []

    monkeypatch.setattr(fdinfo_mod, "read_drm_clients", walk)
    scrape = ScrapeInputs()
    owner = threading.Thread(target=lambda: scrape.drm_clients("/p", time.monotonic() + 10))
    owner.start()
    assert inside.wait(10)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        scrape.drm_clients("/p", time.monotonic() + 0.2)
    assert 0.15 < time.monotonic() - started < 2
    release.set()
    owner.join(10)
    assert scrape.drm_clients("/p", time.monotonic()) == []
    assert walks == ["/p"]
