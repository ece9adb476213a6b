"""Pods for the end-to-end node: real processes in real cgroups named as the kubelet names
them, the kubelet's pod log directories, and a real gRPC PodResources server listing them.

The processes are `sleep`s moved into a cgroup v2 sub-tree of this test's own
(`<cgroup2 mount>/gpu-exporter-e2e-<pid>/kubepods.slice/...`), so that `/proc/<pid>/cgroup`
shows a pod's path to the exporter, exactly as on a node; the fake sysfs's `fs/cgroup`
points at that sub-tree, where the exporter reads whether each pod still runs. Needs root
and a writable cgroup2 mount, as CI has; a missing one fails the test, it is not skipped.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.processes.kubelet import Container, FakeKubelet, Pod, kubelet


@dataclass(frozen=True)
class PodSpec:
    namespace: str
    name: str
    uid: str
    container: str
    container_id: str
    gpus: tuple[str, ...]  # device ids as the device plugin hands them (GPU UUIDs)
    running: bool = True  # False: finished, still listed by the kubelet (#119423)


@dataclass
class Pods:
    root: Path  # the cgroup sub-tree made for this run
    log_dir: Path
    socket: Path
    kubelet: FakeKubelet
    pids: dict[str, int] = field(default_factory=dict)  # running pod name -> its process
    jobs: dict[str, int] = field(default_factory=dict)  # Slurm job id -> its task


def cgroup2_mount() -> Path:
    """Where cgroup v2 is mounted (the unified mount on a hybrid host)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            return Path(left.split()[4])
    raise AssertionError("no cgroup2 mount: the end-to-end pods need cgroup v2 (and root)")


def _pod_dir(root: Path, uid: str) -> Path:
    u = uid.replace("-", "_")
    return (root / "kubepods.slice" / "kubepods-burstable.slice"
            / f"kubepods-burstable-pod{u}.slice")


@contextlib.contextmanager
def pods(workdir: Path, specs: Sequence[PodSpec], slurm_jobs: Sequence[str] = ()
         ) -> Iterator[Pods]:
    """The pods (and Slurm job tasks, as slurmd's cgroup/v2 plugin places them) of
    `specs`, for as long as the context lasts; everything removed after."""
    root = cgroup2_mount() / f"gpu-exporter-e2e-{os.getpid()}"
    log_dir = workdir / "var-log-pods"
    socket = workdir / "kubelet.sock"
    procs: list[subprocess.Popen[bytes]] = []
    made: list[Path] = []

    def start_in(cgroup: Path) -> int:
        cgroup.mkdir(parents=True, exist_ok=True)
        made.append(cgroup)
        proc = subprocess.Popen(["sleep", "3600"])
        procs.append(proc)
        (cgroup / "cgroup.procs").write_text(f"{proc.pid}\n")
        return proc.pid

    try:
        out = Pods(root, log_dir, socket, FakeKubelet([]))
        for spec in specs:
            (log_dir / f"{spec.namespace}_{spec.name}_{spec.uid}" / spec.container).mkdir(
                parents=True, exist_ok=True)
            scope = _pod_dir(root, spec.uid) / f"cri-containerd-{spec.container_id}.scope"
            if spec.running:
                out.pids[spec.name] = start_in(scope)
            else:
                scope.mkdir(parents=True, exist_ok=True)
                made.append(scope)
        for job in slurm_jobs:
            out.jobs[job] = start_in(root / "system.slice" / "slurmstepd.scope" / f"job_{job}"
                                     / "step_0" / "user" / "task_0")
        listed = [Pod(s.namespace, s.name, [Container(s.container, {"nvidia.com/gpu":
                                                                     list(s.gpus)})])
                  for s in specs]
        with kubelet(socket, listed) as server:
            out.kubelet = server
            yield out
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        for path in sorted({p for m in made for p in [m, *m.parents] if root in p.parents
                            or p == root}, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                path.rmdir()
