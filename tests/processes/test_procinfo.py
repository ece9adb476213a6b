"""pid -> executable, container, pod: every cgroup format, from fake /proc trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpu_exporter.readers.procfs.procinfo import (
    CgroupIdentity,
    ProcessTable,
    parse_cgroup,
    parse_start_time,
)
from tests.processes.procfs import remove_process, write_process

CID = "3f4e1a0c9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
CONMON = "aa" * 32
UID = "5d7f1b2e-8c3a-4e6f-9a0b-1c2d3e4f5a6b"
UID_ = UID.replace("-", "_")

CASES: dict[str, tuple[str, CgroupIdentity]] = {
    "v1 docker cgroupfs": (
        f"12:memory:/docker/{CID}\n11:cpu,cpuacct:/docker/{CID}\n"
        f"1:name=systemd:/docker/{CID}\n",
        CgroupIdentity(CID, "docker", None),
    ),
    "v1 docker systemd": (
        f"11:cpu,cpuacct:/system.slice/docker-{CID}.scope\n"
        f"1:name=systemd:/system.slice/docker-{CID}.scope\n",
        CgroupIdentity(CID, "docker", None),
    ),
    "v2 docker systemd": (
        f"0::/system.slice/docker-{CID}.scope\n", CgroupIdentity(CID, "docker", None),
    ),
    "v2 docker cgroupfs": (f"0::/docker/{CID}\n", CgroupIdentity(CID, "docker", None)),
    "hybrid: v2 line is only the systemd scope, v1 names the container": (
        f"12:pids:/docker/{CID}\n1:name=systemd:/docker/{CID}\n0::/system.slice/x.service\n",
        CgroupIdentity(CID, "docker", None),
    ),
    "v1 kubernetes cgroupfs (containerd or docker: bare id)": (
        f"10:memory:/kubepods/burstable/pod{UID}/{CID}\n"
        f"1:name=systemd:/kubepods/burstable/pod{UID}/{CID}\n",
        CgroupIdentity(CID, None, UID),
    ),
    "v1 kubernetes systemd containerd": (
        "4:memory:/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
        CgroupIdentity(CID, "containerd", UID),
    ),
    "v2 kubernetes systemd containerd (burstable)": (
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
        CgroupIdentity(CID, "containerd", UID),
    ),
    "v2 kubernetes systemd containerd (guaranteed)": (
        f"0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
        CgroupIdentity(CID, "containerd", UID),
    ),
    "v2 kubernetes cgroupfs containerd": (
        f"0::/kubepods/besteffort/pod{UID}/{CID}\n", CgroupIdentity(CID, None, UID),
    ),
    "v1 kubernetes systemd CRI-O": (
        "9:devices:/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_}.slice/crio-{CID}.scope\n",
        CgroupIdentity(CID, "cri-o", UID),
    ),
    "v2 kubernetes systemd CRI-O": (
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_}.slice/crio-{CID}.scope\n",
        CgroupIdentity(CID, "cri-o", UID),
    ),
    "v2 kubernetes cgroupfs CRI-O": (
        f"0::/kubepods/besteffort/pod{UID}/crio-{CID}\n", CgroupIdentity(CID, "cri-o", UID),
    ),
    "v2 CRI-O conmon is the monitor, not the container": (
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_}.slice/crio-conmon-{CONMON}.scope\n",
        CgroupIdentity(None, None, UID),
    ),
    "v1 kubernetes systemd docker": (
        "3:blkio:/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_}.slice/docker-{CID}.scope\n",
        CgroupIdentity(CID, "docker", UID),
    ),
    "v2 podman rootful (systemd, container sub-cgroup)": (
        f"0::/machine.slice/libpod-{CID}.scope/container\n",
        CgroupIdentity(CID, "podman", None),
    ),
    "v2 podman rootless": (
        "0::/user.slice/user-1000.slice/user@1000.service/user.slice/"
        f"libpod-{CID}.scope\n",
        CgroupIdentity(CID, "podman", None),
    ),
    "v2 podman conmon": (
        f"0::/machine.slice/libpod-conmon-{CONMON}.scope\n", CgroupIdentity(None, None, None),
    ),
    "v1 podman cgroupfs": (
        f"7:memory:/libpod_parent/libpod-{CID}\n", CgroupIdentity(CID, "podman", None),
    ),
    "v1 podman cgroupfs (bare id)": (
        f"7:memory:/libpod_parent/{CID}\n", CgroupIdentity(CID, "podman", None),
    ),
    "v2 systemd user session slice: no container": (
        "0::/user.slice/user-1000.slice/session-3.scope\n", CgroupIdentity(None, None, None),
    ),
    "v2 systemd service: no container": (
        "0::/system.slice/ssh.service\n", CgroupIdentity(None, None, None),
    ),
    "v1 systemd slices: no container": (
        "12:memory:/user.slice\n1:name=systemd:/user.slice/user-0.slice/session-1.scope\n",
        CgroupIdentity(None, None, None),
    ),
    "v2 root": ("0::/\n", CgroupIdentity(None, None, None)),
    "v2 seen from another cgroup namespace (exporter in a container): relative path": (
        f"0::/../../kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/"
        f"cri-containerd-{CID}.scope\n",
        CgroupIdentity(CID, "containerd", UID),
    ),
    "docker in docker: the innermost container": (
        f"0::/docker/{CONMON}/docker/{CID}\n", CgroupIdentity(CID, "docker", None),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_parse_cgroup(case: str) -> None:
    text, expected = CASES[case]
    assert parse_cgroup(text) == expected


def test_start_time_survives_comm_with_spaces_and_parentheses() -> None:
    middle = " ".join(["R"] + [str(i) for i in range(4, 22)])
    assert parse_start_time(f"42 (a) b (c)) {middle} 987654 1 2\n") == 987654


def test_lookup_reads_comm_cgroup_and_start_time(tmp_path: Path) -> None:
    cgroup = f"0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
    write_process(tmp_path, 4242, comm="python3 (train)", cgroup=cgroup, start=777)
    info = ProcessTable(str(tmp_path)).lookup(4242)
    assert info is not None
    assert (info.pid, info.start_time_ticks, info.executable_name) == (4242, 777,
                                                                       "python3 (train)")
    assert (info.container_id, info.container_runtime, info.pod_uid) == (CID, "containerd",
                                                                         UID)


def test_missing_pid_is_none(tmp_path: Path) -> None:
    assert ProcessTable(str(tmp_path)).lookup(99) is None


def test_pid_reuse_does_not_carry_stale_labels(tmp_path: Path) -> None:
    table = ProcessTable(str(tmp_path))
    write_process(tmp_path, 500, comm="trainer", cgroup=f"0::/docker/{CID}\n", start=100)
    first = table.lookup(500)
    assert first is not None and first.container_id == CID
    table.prune()
    # The process exits and a host process gets the same pid.
    remove_process(tmp_path, 500)
    assert table.lookup(500) is None
    write_process(tmp_path, 500, comm="bash", cgroup="0::/user.slice/session-1.scope\n",
                  start=200)
    second = table.lookup(500)
    assert second is not None
    assert (second.executable_name, second.container_id, second.start_time_ticks) == (
        "bash", None, 200)


def test_cache_is_keyed_by_start_time_and_pruned(tmp_path: Path) -> None:
    table = ProcessTable(str(tmp_path))
    write_process(tmp_path, 7, comm="a", start=1)
    assert table.lookup(7) is not None
    # Same process (same start time): the cache answers, so a changed comm is not reread.
    (tmp_path / "7" / "comm").write_text("renamed\n")
    info = table.lookup(7)
    assert info is not None and info.executable_name == "a"
    table.prune()
    assert len(table) == 1  # looked up this round: kept
    table.prune()
    assert len(table) == 0  # not looked up since: forgotten


def test_cache_is_bounded_and_counts_hits_and_misses(tmp_path: Path) -> None:
    """Beyond `max_entries` processes a lookup still answers, read afresh, and the cache
    does not grow; hits and misses count the lookups that found a process."""
    table = ProcessTable(str(tmp_path), max_entries=2)
    for pid in (11, 12, 13):
        write_process(tmp_path, pid, comm=f"p{pid}", start=pid)
    for _ in range(3):  # three scrapes
        found = table.lookup_many([11, 12, 13, 99])
        assert {pid: i.executable_name for pid, i in found.items()} == {
            11: "p11", 12: "p12", 13: "p13"}
        assert len(table) == 2
        table.prune()
    # Two cached on the first scrape, hit on the next two; the third read each time.
    assert (table.hits, table.misses) == (4, 5)


def test_real_proc_self() -> None:
    info = ProcessTable("/proc").lookup(os.getpid())
    assert info is not None
    assert info.executable_name == Path("/proc/self/comm").read_text().strip()
    fields = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()
    assert info.start_time_ticks == int(fields[19])
