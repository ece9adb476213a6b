"""The one DRM fdinfo walker (amdgpu, i915, xe): which process uses which GPU, how much
engine time and device memory.

The kernel documents the format in Documentation/gpu/drm-usage-stats.rst: every open
DRM file shows `key: value` lines in `/proc/<pid>/fdinfo/<fd>`:

- `drm-driver`, `drm-pdev` (PCI address), `drm-client-id` (one per open DRM file, so a
  file shared by several fds or processes is counted once: we de-duplicate on
  (`drm-pdev`, `drm-client-id`));
- `drm-engine-<name>: <ns> ns` (i915, amdgpu): cumulative busy time of that engine;
- `drm-cycles-<name>` / `drm-total-cycles-<name>` (xe): busy GPU cycles and the GPU
  timestamp they are measured against; busy ratio = delta cycles / delta total cycles;
- `drm-engine-capacity-<name>: N`: N engines of that class (the busy time can reach
  N x elapsed);
- memory: `drm-resident-<region>` / `drm-total-<region>` (current kernels) and the
  older amdgpu `drm-memory-<region>`, with an optional `KiB`/`MiB` unit.

Only fds whose `/proc/<pid>/fd/<n>` link points into `/dev/dri/` are opened, so a walk
costs one readlink per open file plus one small read per DRM file.

Engine classes map to `hw_gpu_task` like this (see `engine_task`):

| driver | general | decoder | encoder | not mapped |
|---|---|---|---|---|
| amdgpu | gfx, compute | dec, jpeg | enc, enc_1 | dma, vpe |
| i915 | render, compute | video | | copy, video-enhance |
| xe | rcs, ccs | vcs | | bcs, vecs |

Intel's video engine (VCS) does decode and encode; it is reported as `decoder`. Copy and
video-enhance engines have no `hw_gpu_task` in the spec and are left out.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from gpu_exporter.model.records import GpuTask
from gpu_exporter.readers.file_values import Unreadable, read_bytes
from gpu_exporter.readers.sysfs.pci import normalize_pci_address

DRIVERS: frozenset[str] = frozenset({"amdgpu", "i915", "xe"})
_MAX_FDINFO_BYTES = 16384
# The inode of the initial (host) PID namespace: PROC_PID_INIT_INO, fixed in the kernel.
HOST_PID_NAMESPACE = "pid:[4026531836]"
MOUNT_HOST_PROC = ("mount the host's /proc (read-only; Kubernetes: a hostPath volume) and "
                   "pass --path.procfs=<that mount>")

_TASKS: dict[str, dict[str, GpuTask]] = {
    "amdgpu": {
        "gfx": "general", "compute": "general",
        "dec": "decoder", "jpeg": "decoder",
        "enc": "encoder", "enc_1": "encoder",
    },
    "i915": {"render": "general", "compute": "general", "video": "decoder"},
    "xe": {"rcs": "general", "ccs": "general", "vcs": "decoder"},
}

# Memory regions that are device memory: amdgpu `vram`, xe `vram0`/`vram1`, i915 `local0`.
_VRAM_PREFIXES = ("vram", "local")
_DIGITS = re.compile(r"[0-9]+")
_UNITS = {"": 1, "B": 1, "KiB": 1024, "MiB": 1024 * 1024, "GiB": 1024 * 1024 * 1024}


def engine_task(driver: str, engine: str) -> GpuTask | None:
    """hw_gpu_task of one engine class of one driver; None for engines the spec has no
    task for (copy, video enhance, ...)."""
    return _TASKS.get(driver, {}).get(engine)


@dataclass(frozen=True)
class DrmClient:
    """One open DRM file (one `drm-client-id`) as seen in fdinfo, in base units.

    `pid` is the lowest pid holding it (`pids` lists all of them, sorted). Mappings are
    keyed by the engine class as the driver names it (`render`, `gfx`, `rcs`, ...).
    A field the driver does not print is absent / None, never 0."""

    pid: int
    pids: tuple[int, ...]
    driver: str  # amdgpu | i915 | xe
    pci_address: str  # drm-pdev, normalised to 0000:03:00.0
    client_id: int
    engine_busy_ns: Mapping[str, int] = field(default_factory=dict)  # drm-engine-*
    engine_cycles: Mapping[str, int] = field(default_factory=dict)  # xe drm-cycles-*
    engine_total_cycles: Mapping[str, int] = field(default_factory=dict)  # xe drm-total-cycles-*
    engine_capacity: Mapping[str, int] = field(default_factory=dict)  # drm-engine-capacity-*
    # resident device memory: drm-resident-vram*, else the older drm-memory-vram
    vram_bytes: int | None = None
    read_ns: int = 0  # time.monotonic_ns() when this client's fdinfo was read

    @property
    def key(self) -> tuple[str, int]:
        return (self.pci_address, self.client_id)


def procfs_problem(procfs: str) -> Unreadable | None:
    """Why the DRM files of every process on the host cannot be read under `procfs`, or
    None when they can: it must list, be the host's (its pid 1 in the host's PID
    namespace, where that can be told), and let us into other processes' `fd` folders
    (ptrace read access: the same user, or CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH)."""
    try:
        pids = [n for n in os.listdir(procfs) if n.isdigit()]
    except OSError as exc:
        return Unreadable(f"cannot list {procfs}: {exc.strerror}", MOUNT_HOST_PROC)
    if not pids:
        return Unreadable(f"{procfs} lists no processes: it is not a procfs", MOUNT_HOST_PROC)
    try:
        namespace = os.readlink(os.path.join(procfs, "1", "ns", "pid"))
    except PermissionError:
        namespace = None  # told by the fd check below
    except OSError:
        namespace = HOST_PID_NAMESPACE  # no such link (an old kernel): cannot be told
    if namespace is not None and namespace != HOST_PID_NAMESPACE:
        return Unreadable(
            f"{procfs} is a container's own /proc ({namespace}, not the host's PID "
            "namespace): the GPU processes of other containers are not seen",
            "run in the host's PID namespace (Kubernetes `hostPID: true`, docker "
            f"`--pid=host`), or {MOUNT_HOST_PROC}")
    probe = os.path.join(procfs, "1" if "1" in pids else min(pids, key=int), "fd")
    try:
        os.listdir(probe)
    except PermissionError:
        return Unreadable(
            f"no permission to read other processes' open files ({probe}): only DRM "
            "clients of the exporter's own user are seen",
            "run as root with CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH (Kubernetes: "
            "deploy/kubernetes/overlays/process-fdinfo; systemd: the drop-in "
            "gpu-exporter.service.d/process-fdinfo.conf)")
    except OSError:
        pass  # the process exited meanwhile: nothing to tell from it
    return None


def read_drm_clients(
    procfs: str = "/proc", drivers: Iterable[str] = DRIVERS, deadline: float | None = None
) -> list[DrmClient]:
    """Every DRM client of the given drivers on this host, de-duplicated by
    (`drm-pdev`, `drm-client-id`), sorted by (PCI address, client id).

    Processes and files that vanish or cannot be read during the walk are skipped (a
    walk never raises for them). With `deadline` (a time.monotonic() value) the walk
    stops when it passes and raises TimeoutError, so a caller never reports a partial
    sum as if it were complete."""
    wanted = frozenset(drivers)
    found: dict[tuple[str, int], DrmClient] = {}
    pids: dict[tuple[str, int], set[int]] = {}
    try:
        entries = os.listdir(procfs)
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError("DRM fdinfo walk passed the scrape deadline")
        pid = int(name)
        for client in _clients_of(os.path.join(procfs, name), pid, wanted):
            pids.setdefault(client.key, set()).add(pid)
            if client.key not in found:
                found[client.key] = client
    out = []
    for key, client in found.items():
        holders = tuple(sorted(pids[key]))
        out.append(replace(client, pid=holders[0], pids=holders))
    out.sort(key=lambda c: c.key)
    return out


def _clients_of(proc_dir: str, pid: int, wanted: frozenset[str]) -> list[DrmClient]:
    fd_dir = os.path.join(proc_dir, "fd")
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return []
    out = []
    for fd in fds:
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if not target.startswith("/dev/dri/"):
            continue
        raw = read_bytes(os.path.join(proc_dir, "fdinfo", fd), _MAX_FDINFO_BYTES)
        if raw is None:
            continue
        client = parse_fdinfo(raw.decode("utf-8", "replace"), pid, wanted)
        if client is not None:
            out.append(client)
    return out


def parse_fdinfo(
    text: str, pid: int = 0, drivers: Iterable[str] = DRIVERS, read_ns: int | None = None
) -> DrmClient | None:
    """One fdinfo file's text to a DrmClient; None when it is not a DRM client of the
    wanted drivers or lacks the driver, PCI address or client id. Values that do not
    parse are left out (absent), never 0."""
    kv: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.startswith("drm-"):
            kv[key.strip()] = value.strip()
    driver = kv.get("drm-driver")
    if driver not in frozenset(drivers):
        return None
    pdev = normalize_pci_address(kv.get("drm-pdev", ""))
    client_id = _int(kv.get("drm-client-id"))
    if pdev is None or client_id is None or driver is None:
        return None
    busy: dict[str, int] = {}
    cycles: dict[str, int] = {}
    total: dict[str, int] = {}
    capacity: dict[str, int] = {}
    resident: dict[str, int] = {}
    legacy: dict[str, int] = {}
    for key, value in kv.items():
        if key.startswith("drm-engine-capacity-"):
            n = _int(value)
            if n is not None and n > 0:
                capacity[key[len("drm-engine-capacity-"):]] = n
        elif key.startswith("drm-engine-"):
            ns = _with_unit(value, {"ns": 1, "": 1})
            if ns is not None:
                busy[key[len("drm-engine-"):]] = ns
        elif key.startswith("drm-total-cycles-"):
            n = _int(value)
            if n is not None:
                total[key[len("drm-total-cycles-"):]] = n
        elif key.startswith("drm-cycles-"):
            n = _int(value)
            if n is not None:
                cycles[key[len("drm-cycles-"):]] = n
        elif key.startswith("drm-resident-"):
            region = key[len("drm-resident-"):]
            b = _with_unit(value, _UNITS)
            if b is not None and region.startswith(_VRAM_PREFIXES):
                resident[region] = b
        elif key.startswith("drm-memory-"):
            region = key[len("drm-memory-"):]
            b = _with_unit(value, _UNITS)
            if b is not None and region.startswith(_VRAM_PREFIXES):
                legacy[region] = b
    vram = resident or legacy
    return DrmClient(
        pid=pid, pids=(pid,), driver=driver, pci_address=pdev, client_id=client_id,
        engine_busy_ns=busy, engine_cycles=cycles, engine_total_cycles=total,
        engine_capacity=capacity, vram_bytes=sum(vram.values()) if vram else None,
        read_ns=time.monotonic_ns() if read_ns is None else read_ns,
    )


def _int(text: str | None) -> int | None:
    if text is None or not _DIGITS.fullmatch(text.strip()):
        return None  # int() alone would take "1_000", "+5" and non-ASCII digits
    return int(text.strip())


def _with_unit(text: str, units: Mapping[str, int]) -> int | None:
    number, _, unit = text.strip().partition(" ")
    scale = units.get(unit.strip())
    n = _int(number)
    if scale is None or n is None:
        return None
    return n * scale


# --- busy ratios between two walks -------------------------------------------------------

@dataclass(frozen=True)
class ClientUsage:
    """Engine use of one client between two walks, as ratios 0..1 by hw_gpu_task."""

    client: DrmClient
    engine_ratio: Mapping[str, float]  # by the driver's engine class name
    utilization_ratio: Mapping[GpuTask, float]


class EngineUsage:
    """Turns successive walks into busy ratios (deltas between walks).

    Per engine class: busy time / (elapsed x capacity), or for xe delta cycles / (delta
    total cycles x capacity). Per device and task: the clients' ratios of one engine class
    are summed, and a task is the busiest of its engine classes (two engine classes
    running side by side do not make a task busier than 1). Every ratio is clamped to
    0..1. A client seen for the first time has no ratio until the next walk: its busy
    time may have accrued before this interval."""

    def __init__(self) -> None:
        self._previous: dict[tuple[str, int], DrmClient] | None = None

    def update(self, clients: Iterable[DrmClient]) -> list[ClientUsage]:
        now = {c.key: c for c in clients}
        previous = self._previous
        self._previous = now
        if previous is None:
            return []
        out = []
        for key, client in now.items():
            before = previous.get(key)
            engines = _engine_ratios(before, client)
            if engines is None:
                continue
            out.append(ClientUsage(client, engines, _tasks(client.driver, engines)))
        return out


def device_utilization(usages: Iterable[ClientUsage]) -> dict[str, dict[GpuTask, float]]:
    """Per PCI address, the busy ratio by task, summed over clients (clamped 0..1).
    A device with no client seen in both walks is absent from the mapping: nothing was
    measured on it, so nothing is reported (not 0)."""
    per_engine: dict[tuple[str, str], dict[str, float]] = {}
    for usage in usages:
        c = usage.client
        engines = per_engine.setdefault((c.pci_address, c.driver), {})
        for engine, ratio in usage.engine_ratio.items():
            engines[engine] = engines.get(engine, 0.0) + ratio
    out: dict[str, dict[GpuTask, float]] = {}
    for (pci, driver), engines in per_engine.items():
        tasks = _tasks(driver, {e: _clamp(r) for e, r in engines.items()})
        out.setdefault(pci, {}).update(tasks)
    return out


def _engine_ratios(before: DrmClient | None, after: DrmClient) -> dict[str, float] | None:
    out: dict[str, float] = {}
    if after.engine_cycles:
        for engine, cyc in after.engine_cycles.items():
            tot = after.engine_total_cycles.get(engine)
            if tot is None:
                continue
            if before is None:
                return None
            cyc0 = before.engine_cycles.get(engine, 0)
            tot0 = before.engine_total_cycles.get(engine)
            if tot0 is None:
                continue
            d_tot = tot - tot0
            d_cyc = cyc - cyc0
            if d_tot <= 0 or d_cyc < 0:
                continue
            out[engine] = _clamp(d_cyc / (d_tot * after.engine_capacity.get(engine, 1)))
        return out
    if before is None:
        return None
    elapsed = after.read_ns - before.read_ns
    if elapsed <= 0:
        return None
    for engine, ns in after.engine_busy_ns.items():
        ns0 = before.engine_busy_ns.get(engine, 0)
        delta = ns - ns0
        if delta < 0:
            continue
        out[engine] = _clamp(delta / (elapsed * after.engine_capacity.get(engine, 1)))
    return out


def _tasks(driver: str, engines: Mapping[str, float]) -> dict[GpuTask, float]:
    tasks: dict[GpuTask, float] = {}
    for engine, ratio in engines.items():
        task = engine_task(driver, engine)
        if task is not None:
            tasks[task] = max(tasks.get(task, 0.0), ratio)
    return tasks


def _clamp(x: float) -> float:
    return min(1.0, max(0.0, x))
