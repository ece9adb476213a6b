"""Which pods still have something running on this node, from node-local files only.

The kubelet's PodResources `List` keeps listing pods that have finished (Succeeded or
Failed) with the devices they held, until the pod object is deleted (kubernetes#119423),
while the device manager hands those devices to new pods. A GPU listed for a finished pod
is not allocated. Two node-local signals decide, without the API server and without the
container runtime's socket (which would give the exporter control of every container):

- the kubelet's pod log directories, `/var/log/pods/<namespace>_<pod>_<uid>`, name every
  pod the node has (namespaces and pod names are DNS names: they hold no `_`), so a
  PodResources entry (namespace, pod) gets its uid;
- the pod's cgroup (`kubepods…/…pod<uid>…`) tells whether any process of the pod remains:
  cgroup v2 `cgroup.events` `populated 1`; cgroup v1 a non-empty `cgroup.procs` in the
  pod's directory or below. A running pod always has its sandbox (pause) process, even
  between restarts of a crashing container; a finished pod has none.

A pod without a log directory (the kubelet is creating it) or without a cgroup tree to
read counts as running: only a pod shown finished is left out.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpu_exporter.readers.file_values import read_bytes
from gpu_exporter.readers.procfs.procinfo import pod_uid_of

DEFAULT_LOG_DIR = "/var/log/pods"
# Where the kubelet's hierarchy may be, below <sysfs>/fs/cgroup: the unified (v2) mount,
# the v2 mount of a hybrid host, then v1 hierarchies the kubelet always uses.
_CGROUP_ROOTS = ("", "unified", "systemd", "pids", "memory", "cpu,cpuacct", "cpu")
_KUBEPODS = ("kubepods.slice", "kubepods")
_MAX_DEPTH = 4  # kubepods / qos / pod / container / (podman's container sub-cgroup)


@dataclass(frozen=True)
class PodLiveness:
    """One reading of the node: pod uids by (namespace, name), and which uids run."""

    uids: dict[tuple[str, str], frozenset[str]]
    running: frozenset[str]
    cgroups: bool  # a kubelet cgroup tree was found

    def finished(self, namespace: str, pod: str) -> bool:
        """True only when the node shows the pod has nothing left running."""
        uids = self.uids.get((namespace, pod))
        if not uids or not self.cgroups:
            return False
        return not (uids & self.running)


class LivenessUnavailable(Exception):
    """The pod log directory cannot be read: the message says why."""


def read(log_dir: str, sysfs: str) -> PodLiveness:
    """Raises LivenessUnavailable when `log_dir` cannot be listed."""
    try:
        names = os.listdir(log_dir)
    except OSError as exc:
        raise LivenessUnavailable(
            f"cannot list the kubelet's pod log directory {log_dir}: "
            f"{exc.strerror or exc}") from None
    uids: dict[tuple[str, str], set[str]] = {}
    for name in names:
        parts = name.split("_")
        if len(parts) == 3 and all(parts):
            uids.setdefault((parts[0], parts[1]), set()).add(parts[2])
    root = kubepods_root(sysfs)
    running = frozenset(_running(root)) if root is not None else frozenset()
    return PodLiveness({k: frozenset(v) for k, v in uids.items()}, running, root is not None)


def kubepods_root(sysfs: str) -> Path | None:
    base = Path(sysfs, "fs", "cgroup")
    for sub in _CGROUP_ROOTS:
        for name in _KUBEPODS:
            path = base / sub / name if sub else base / name
            if os.path.isdir(path):
                return path
    return None


def _running(root: Path) -> Iterator[str]:
    for pod_dir in _pod_dirs(root, 0):
        uid = pod_uid_of(pod_dir.name)
        if uid is not None and _populated(pod_dir):
            yield uid


def _pod_dirs(path: Path, depth: int) -> Iterator[Path]:
    """Pod directories under the kubepods root (at depth 1, or 2 under a QoS class)."""
    if depth > 2:
        return
    for child in _subdirs(path):
        if pod_uid_of(child.name) is not None:
            yield child
        elif depth < 1:
            yield from _pod_dirs(child, depth + 1)


def _populated(pod_dir: Path) -> bool:
    events = read_bytes(pod_dir / "cgroup.events", 4096)
    if events is not None:  # cgroup v2: the kernel keeps the answer for the whole subtree
        return b"populated 1" in events
    return _has_processes(pod_dir, 0)


def _has_processes(path: Path, depth: int) -> bool:
    procs = read_bytes(path / "cgroup.procs", 4096)
    if procs is not None and procs.strip():
        return True
    return depth < _MAX_DEPTH and any(_has_processes(c, depth + 1) for c in _subdirs(path))


def _subdirs(path: Path) -> list[Path]:
    try:
        with os.scandir(path) as entries:
            return [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
