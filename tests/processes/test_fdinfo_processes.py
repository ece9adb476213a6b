"""AMD per-process usage from DRM fdinfo (the shared walker), end to end: a fake /sys with
a real card capture, a fake /proc with DRM clients, a real PodResources server."""

from __future__ import annotations

import time
from pathlib import Path

from gpu_exporter.collectors import REGISTRY
from tests.helpers import exporter, find, parse, value
from tests.processes.kubelet import Container, Pod, kubelet
from tests.processes.procfs import write_process
from tests.sysfs.tree import FakeSysfs, raw_text

ADDRESS = "0000:03:00.0"
UID = "44444444-2222-4333-8444-555555555555"
CID = "e5" * 32
MIB = 1024 * 1024


def _fdinfo(client_id: int, gfx_ns: int, vram_kib: int) -> str:
    return (
        "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t1072\n"
        "drm-driver:\tamdgpu\n"
        f"drm-pdev:\t{ADDRESS}\n"
        f"drm-client-id:\t{client_id}\n"
        f"drm-memory-vram:\t{vram_kib} KiB\n"
        "drm-memory-gtt:\t2048 KiB\n"
        f"drm-engine-gfx:\t{gfx_ns} ns\n"
        "drm-engine-dec:\t0 ns\n"
    )


def _write(procfs: Path, gfx_ns: int) -> None:
    cgroup = (f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/"
              f"cri-containerd-{CID}.scope\n")
    # Two fds of one DRM file (one client) and a second file: memory of the two clients.
    write_process(procfs, 3001, comm="rocm-train", cgroup=cgroup, start=5,
                  fdinfo={5: _fdinfo(21, gfx_ns, 256 * 1024), 6: _fdinfo(21, gfx_ns, 256 * 1024),
                          7: _fdinfo(22, 0, 64 * 1024)})
    write_process(procfs, 3002, comm="Xorg", cgroup="0::/system.slice/display.service\n",
                  start=6, fdinfo={4: _fdinfo(3, 0, 32 * 1024)})


def test_amd_processes_from_fdinfo_with_pod(tmp_path: Path) -> None:
    sysfs = FakeSysfs(tmp_path / "sys")
    sysfs.add("rx6900xt", ADDRESS, 0)
    hw_id = raw_text("rx6900xt", "device/unique_id")
    procfs = tmp_path / "proc"
    _write(procfs, gfx_ns=1_000_000_000)
    sock = tmp_path / "kubelet.sock"
    keep = {"amd", "processes"}
    args = [*(f"--no-collector.{c.name}" for c in REGISTRY if c.name not in keep),
            "--collector.amd", "--collector.processes",
            f"--path.sysfs={tmp_path / 'sys'}", f"--path.procfs={procfs}",
            f"--processes.kubelet-socket={sock}", "--processes.kubernetes-device-labels"]
    pods = [Pod("rocm", "trainer-0", [Container("main", {"amd.com/gpu": [ADDRESS]})])]
    with kubelet(sock, pods), exporter(args) as exp:
        t0 = time.monotonic()
        first = parse(exp.scrape())
        t1 = time.monotonic()
        time.sleep(0.5)
        busy_ns = 300_000_000
        _write(procfs, gfx_ns=1_000_000_000 + busy_ns)
        t2 = time.monotonic()
        second = parse(exp.scrape())
        t3 = time.monotonic()

    assert value(first, "gpu_exporter_collector_success", collector="processes") == 1
    train = find(first, "process_gpu_memory_usage_bytes", process_pid="3001")
    assert len(train) == 1
    # 256 MiB (one client, held through two fds: counted once) + 64 MiB (second client)
    assert train[0].value == 320 * MIB
    assert train[0].labels.items() >= {
        "hw_id": hw_id, "hw_vendor": "amd", "gpu_pci_address": ADDRESS,
        "process_executable_name": "rocm-train", "container_id": CID, "k8s_pod_uid": UID,
        "k8s_pod_name": "trainer-0", "k8s_namespace_name": "rocm",
        "k8s_container_name": "main",
    }.items()
    xorg = find(first, "process_gpu_memory_usage_bytes", process_pid="3002")[0]
    assert xorg.value == 32 * MIB and xorg.labels.get("k8s_pod_name", "") == ""
    # First walk: a baseline, no utilization yet (absent, not 0).
    assert not find(first, "process_gpu_utilization_ratio")

    # Second walk: busy time over the elapsed time between the two reads.
    ratio = value(second, "process_gpu_utilization_ratio", process_pid="3001",
                  hw_gpu_task="general")
    assert busy_ns / 1e9 / (t3 - t0) <= ratio <= busy_ns / 1e9 / (t2 - t1)
    assert value(second, "process_gpu_utilization_ratio", process_pid="3002",
                 hw_gpu_task="general") == 0
    # The kubelet names AMD GPUs by PCI address: the device's series carry the pod.
    up = find(second, "hw_gpu_up", hw_id=hw_id)[0]
    assert (up.labels["k8s_pod_name"], up.labels["k8s_namespace_name"]) == ("trainer-0",
                                                                             "rocm")
