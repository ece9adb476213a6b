"""pid -> who runs it: executable name, container id, Kubernetes pod uid and Slurm job,
from /proc.

Sources: `/proc/<pid>/comm` (the executable name; the command line is never read, it
carries secrets), `/proc/<pid>/cgroup` (the container id and pod uid, for docker,
containerd, CRI-O and podman on cgroup v1 and v2 with the cgroupfs and systemd drivers;
the Slurm job id from slurmd's cgroup plugins, v1 and v2) and `/proc/<pid>/stat` (the
process start time, so that a reused pid never inherits the previous process's labels).
The environment (`SLURM_JOB_ID`) is never read: another user's needs CAP_SYS_PTRACE.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from gpu_exporter.readers.file_values import read_bytes

Runtime = Literal["docker", "containerd", "cri-o", "podman"]
# A cgroup file with every v1 hierarchy and deep Kubernetes paths stays well under this.
_MAX_PROC_FILE_BYTES = 65536

_ID = r"[0-9a-f]{64}"
# systemd-driver scopes name the runtime: docker-<id>.scope, cri-containerd-<id>.scope,
# crio-<id>.scope, libpod-<id>.scope. conmon's own scopes (crio-conmon-<id>,
# libpod-conmon-<id>) are the runtime's monitor, not the container: they do not match.
_SCOPE = re.compile(rf"^(docker|cri-containerd|crio|libpod)-({_ID})(?:\.scope)?$")
_BARE_ID = re.compile(rf"^{_ID}$")
# pod<uid>: dashes with the cgroupfs driver, underscores inside systemd slice names.
_POD = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$"
)
# Slurm's cgroup plugins: v1 `/slurm[_<node>]/uid_<uid>/job_<id>/step_<s>/...` under each
# controller; v2 `/system.slice/[<node>_]slurmstepd.scope/job_<id>/step_<s>/user/task_<n>`.
_SLURM_JOB = re.compile(r"^job_([0-9]+)$")
_SLURM_V1_ROOT = re.compile(r"^slurm(_.+)?$")
_SLURM_V2_SCOPE = re.compile(r"^(.+_)?slurmstepd\.scope$")
_RUNTIME_OF_PREFIX: dict[str, Runtime] = {
    "docker": "docker", "cri-containerd": "containerd", "crio": "cri-o", "libpod": "podman",
}
# cgroupfs-driver parents whose child directory is a bare container id.
_RUNTIME_OF_PARENT: dict[str, Runtime] = {
    "docker": "docker", "libpod_parent": "podman",
}


@dataclass(frozen=True)
class CgroupIdentity:
    container_id: str | None = None  # 64 hex digits, no runtime prefix
    runtime: Runtime | None = None  # None when the path does not tell (bare id in kubepods)
    pod_uid: str | None = None  # Kubernetes pod uid with dashes
    slurm_job_id: str | None = None


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    start_time_ticks: int  # /proc/<pid>/stat field 22: identifies this process, not the pid
    executable_name: str | None
    container_id: str | None
    container_runtime: Runtime | None
    pod_uid: str | None
    slurm_job_id: str | None = None


def pod_uid_of(component: str) -> str | None:
    """The pod uid a kubelet cgroup directory is named for (`pod<uid>`, or
    `kubepods-<qos>-pod<uid_with_underscores>.slice`), or None."""
    pod = _POD.search(component)
    if pod and (component.startswith("pod") or "kubepods" in component):
        return pod.group(1).replace("_", "-")
    return None


def slurm_job(parts: list[str]) -> str | None:
    """The job id of a Slurm cgroup path (its components), or None."""
    for i, part in enumerate(parts):
        job = _SLURM_JOB.match(part)
        if job is None or i == 0:
            continue
        parent = parts[i - 1]
        if _SLURM_V2_SCOPE.match(parent) or (
                parent.startswith("uid_") and i >= 2 and _SLURM_V1_ROOT.match(parts[i - 2])):
            return job.group(1)
    return None


def _parse_path(path: str) -> CgroupIdentity:
    container_id: str | None = None
    runtime: Runtime | None = None
    pod_uid: str | None = None
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate(parts):
        uid = pod_uid_of(part)
        if uid is not None:
            pod_uid = uid
            continue
        scope = _SCOPE.match(part)
        if scope:
            # The innermost container wins (docker-in-docker, nested podman).
            runtime, container_id = _RUNTIME_OF_PREFIX[scope.group(1)], scope.group(2)
            continue
        if _BARE_ID.match(part):
            parent = parts[i - 1] if i > 0 else ""
            container_id = part
            runtime = _RUNTIME_OF_PARENT.get(parent)
    return CgroupIdentity(container_id, runtime, pod_uid, slurm_job(parts))


def parse_cgroup(text: str) -> CgroupIdentity:
    """`/proc/<pid>/cgroup` text to the container and pod it names (v1, v2 or hybrid).

    The unified (v2, `0::`) line is preferred; v1 lines fill in what it lacks (on a
    hybrid host the v2 line is often just the systemd scope)."""
    found: list[CgroupIdentity] = []
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        hierarchy, _controllers, path = fields
        ident = _parse_path(path)
        if hierarchy == "0":
            found.insert(0, ident)
        else:
            found.append(ident)
    container = next((f for f in found if f.container_id), None)
    pod = next((f.pod_uid for f in found if f.pod_uid), None)
    job = next((f.slurm_job_id for f in found if f.slurm_job_id), None)
    if container is None:
        return CgroupIdentity(pod_uid=pod, slurm_job_id=job)
    return CgroupIdentity(container.container_id, container.runtime, container.pod_uid or pod,
                          job)


def parse_start_time(stat_text: str) -> int:
    """Field 22 (starttime, clock ticks since boot) of /proc/<pid>/stat. The comm field
    (2) may hold spaces and parentheses, so fields are counted after its last ')'."""
    rest = stat_text[stat_text.rindex(")") + 2:].split()
    return int(rest[19])  # rest[0] is field 3 (state)


def _read(path: str) -> str | None:
    raw = read_bytes(path, _MAX_PROC_FILE_BYTES)
    return None if raw is None else raw.decode("utf-8", "replace")


# Processes whose facts are kept (about 0.5 KiB each with a container and a pod, measured
# in docs/performance.md, issue #34: 4 MiB at most): far more GPU processes than a node
# runs; beyond it a process is read afresh on every lookup instead of growing the cache.
MAX_CACHED_PROCESSES = 8192


class ProcessTable:
    """Looks processes up by pid, caching by (pid, start time): what cannot change for a
    process's life (its executable name, cgroup: container, pod, job) is read once, and
    each later lookup reads only its start time.

    A pid that is reused by a new process between two scrapes has a new start time, so it
    is read afresh; entries of processes not looked up in the last `prune()` round go, and
    at most `max_entries` are kept. `hits` and `misses` count the lookups that found a
    live process, by whether its facts were cached."""

    def __init__(self, procfs: str = "/proc",
                 max_entries: int = MAX_CACHED_PROCESSES) -> None:
        # Paths as strings: read for every GPU process on every scrape, where pathlib's
        # joins cost more than the reads (benchmark 1b).
        self._procfs = procfs.rstrip("/") or "/"
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._cache: dict[tuple[int, int], ProcessInfo] = {}
        self._used: set[tuple[int, int]] = set()
        self._lock = threading.Lock()

    def _start_time(self, pid: int) -> int | None:
        text = _read(f"{self._procfs}/{pid}/stat")
        if text is None:
            return None
        try:
            return parse_start_time(text)
        except (ValueError, IndexError):
            return None

    def lookup(self, pid: int) -> ProcessInfo | None:
        """The process now running as `pid`, or None when there is none (it exited, or
        it lives in a pid namespace this procfs does not show)."""
        start = self._start_time(pid)
        if start is None:
            return None
        key = (pid, start)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self.hits += 1
                self._used.add(key)
                return cached
        base = f"{self._procfs}/{pid}"
        comm = _read(f"{base}/comm")
        cgroup = _read(f"{base}/cgroup")
        # The pid may have been reused while we read: only keep what belongs to `start`.
        if self._start_time(pid) != start:
            return None
        ident = parse_cgroup(cgroup) if cgroup is not None else CgroupIdentity()
        name = comm.rstrip("\n") if comm else None
        info = ProcessInfo(pid, start, name or None, ident.container_id, ident.runtime,
                           ident.pod_uid, ident.slurm_job_id)
        with self._lock:
            self.misses += 1
            if key in self._cache or len(self._cache) < self.max_entries:
                self._cache[key] = info
                self._used.add(key)
        return info

    def lookup_many(self, pids: Iterable[int]) -> dict[int, ProcessInfo]:
        out: dict[int, ProcessInfo] = {}
        for pid in set(pids):
            info = self.lookup(pid)
            if info is not None:
                out[pid] = info
        return out

    def prune(self) -> None:
        """Forget processes not looked up since the previous prune (call once a scrape)."""
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if k in self._used}
            self._used = set()

    def __len__(self) -> int:
        return len(self._cache)
