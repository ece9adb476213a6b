"""Writes what a Kubernetes node shows of its pods: the kubelet's pod log directories and
the pods' cgroups (v2 with the systemd driver, v2 with cgroupfs, v1), as plain files."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

Layout = Literal["v2-systemd", "v2-cgroupfs", "v1-cgroupfs", "v1-systemd"]


def pod_log_dir(log_dir: Path, namespace: str, pod: str, uid: str,
                containers: tuple[str, ...] = ("main",)) -> None:
    for c in containers:
        d = log_dir / f"{namespace}_{pod}_{uid}" / c
        d.mkdir(parents=True, exist_ok=True)
        (d / "0.log").write_text("")


def pod_cgroup(sysfs: Path, layout: Layout, uid: str, *, running: bool,
               qos: str = "burstable", container: str = "ab" * 32) -> Path:
    """The pod's cgroup with one container below it; `running` puts a pid in it (v1) or
    marks the subtree populated (v2), as the kernel does."""
    u = uid.replace("-", "_")
    cg = sysfs / "fs" / "cgroup"
    qos_part = "" if qos == "guaranteed" else qos
    if layout == "v2-systemd":
        base = cg / "kubepods.slice"
        if qos_part:
            base = base / f"kubepods-{qos_part}.slice"
            pod = base / f"kubepods-{qos_part}-pod{u}.slice"
        else:
            pod = base / f"kubepods-pod{u}.slice"
        leaf = pod / f"cri-containerd-{container}.scope"
    elif layout == "v1-systemd":
        base = cg / "memory" / "kubepods.slice"
        if qos_part:
            base = base / f"kubepods-{qos_part}.slice"
            pod = base / f"kubepods-{qos_part}-pod{u}.slice"
        else:
            pod = base / f"kubepods-pod{u}.slice"
        leaf = pod / f"cri-containerd-{container}.scope"
    else:
        root = cg / "kubepods" if layout == "v2-cgroupfs" else cg / "memory" / "kubepods"
        pod = (root / qos_part if qos_part else root) / f"pod{uid}"
        leaf = pod / container
    leaf.mkdir(parents=True, exist_ok=True)
    if layout.startswith("v2"):
        for d in (pod, leaf):
            (d / "cgroup.events").write_text(f"populated {int(running)}\nfrozen 0\n")
        (pod / "cgroup.procs").write_text("")
        (leaf / "cgroup.procs").write_text("4242\n" if running else "")
    else:
        (pod / "cgroup.procs").write_text("")
        (leaf / "cgroup.procs").write_text("4242\n4243\n" if running else "")
    return pod
