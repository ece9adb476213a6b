"""The processes collector's own sources say whether they work, and if not why and what
to do: `processes.fdinfo` (DRM fdinfo of AMD/Intel processes) and `processes.kubelet`
(PodResources). Through the real exporter (`dump`, `doctor`) on fake /sys and /proc
trees, a real gRPC server and a real unprivileged user."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from gpu_exporter.collectors import REGISTRY
from tests.helpers import parse, run_as_nobody, run_cli, value, world_readable_dir
from tests.processes.procfs import write_process
from tests.sysfs.tree import FakeSysfs

FDINFO = ("drm-driver:\tamdgpu\ndrm-pdev:\t0000:03:00.0\ndrm-client-id:\t7\n"
          "drm-memory-vram:\t1024 KiB\ndrm-engine-gfx:\t0 ns\n")


def flags(root: Path, sock: Path | None = None) -> list[str]:
    """processes, and amd for the card its process series join."""
    return [*(f"--no-collector.{c.name}" for c in REGISTRY
              if c.name not in ("processes", "amd")),
            f"--path.sysfs={root / 'sys'}", f"--path.procfs={root / 'proc'}",
            f"--processes.kubelet-socket={sock or root / 'kubelet.sock'}"]


def node(root: Path, amd_card: bool = True) -> Path:
    """A fake node: an AMD card (or none), pid 1 and one process with a DRM client."""
    sysfs = FakeSysfs(root / "sys")
    if amd_card:
        sysfs.add("rx6900xt", "0000:03:00.0", 0)
    procfs = root / "proc"
    write_process(procfs, 1, comm="systemd", fdinfo={})
    write_process(procfs, 4242, comm="rocm-app", fdinfo={5: FDINFO})
    return procfs


def state(series: list, feature: str) -> str:  # type: ignore[type-arg]
    [on] = [s.labels["state"] for s in series
            if s.name == "gpu_exporter_feature_status" and s.labels["feature"] == feature
            and s.value == 1]
    return str(on)


def doctor_lines(args: list[str], env: dict[str, str] | None = None) -> list[str]:
    res = run_cli(["doctor", *args], env=env)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def line_and_fix(lines: list[str], feature: str) -> tuple[str, str]:
    i = next(i for i, x in enumerate(lines) if x.strip().startswith(f"{feature} "))
    return lines[i], lines[i + 1].strip()


def test_fdinfo_works_on_the_hosts_proc(tmp_path: Path) -> None:
    node(tmp_path)
    res = run_cli(["dump", *flags(tmp_path)])
    assert res.returncode == 0, res.stderr
    s = parse(res.stdout)
    assert state(s, "processes.fdinfo") == "enabled"
    assert value(s, "process_gpu_memory_usage_bytes", process_pid="4242") == 1024 * 1024


def test_fdinfo_is_off_without_an_amd_or_intel_card(tmp_path: Path) -> None:
    node(tmp_path, amd_card=False)
    res = run_cli(["dump", *flags(tmp_path)])
    assert state(parse(res.stdout), "processes.fdinfo") == "disabled"


def test_a_containers_own_proc_says_to_use_the_hosts(tmp_path: Path) -> None:
    procfs = node(tmp_path)
    (procfs / "1" / "ns").mkdir()
    # What readlink shows for pid 1 of a container's own PID namespace.
    os.symlink("pid:[4026532201]", procfs / "1" / "ns" / "pid")
    s = parse(run_cli(["dump", *flags(tmp_path)]).stdout)
    assert state(s, "processes.fdinfo") == "unavailable"
    assert value(s, "gpu_exporter_collector_success", collector="processes") == 1
    line, fix = line_and_fix(doctor_lines(flags(tmp_path)), "processes.fdinfo")
    assert "unavailable" in line and "container's own /proc (pid:[4026532201]" in line
    assert fix.startswith("fix: run in the host's PID namespace (Kubernetes `hostPID: true`")
    assert "--path.procfs" in fix


def test_a_missing_proc_says_to_mount_the_hosts(tmp_path: Path) -> None:
    node(tmp_path)
    args = [a if not a.startswith("--path.procfs") else f"--path.procfs={tmp_path}/nope"
            for a in flags(tmp_path)]
    line, fix = line_and_fix(doctor_lines(args), "processes.fdinfo")
    assert "unavailable" in line and f"cannot list {tmp_path}/nope" in line
    assert fix == ("fix: mount the host's /proc (read-only; Kubernetes: a hostPath volume) "
                   "and pass --path.procfs=<that mount>")


@pytest.fixture
def world_readable() -> Iterator[Path]:
    with world_readable_dir("gpu-exporter-proc-") as root:
        yield root


def test_no_privilege_for_other_processes_says_which_capabilities(
        world_readable: Path) -> None:
    procfs = node(world_readable)
    for d in procfs.rglob("*"):
        if d.is_dir():
            os.chmod(d, 0o755)
    os.chmod(procfs / "1" / "fd", 0o700)  # as the kernel shows another user's process
    res = run_as_nobody(["doctor", *flags(world_readable)])
    assert res.returncode == 0, res.stderr
    line, fix = line_and_fix(res.stdout.splitlines(), "processes.fdinfo")
    assert "unavailable" in line and "no permission to read other processes' open files" in line
    assert "CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH" in fix


def test_kubelet_off_on_a_host_that_is_not_kubernetes(tmp_path: Path) -> None:
    node(tmp_path)
    res = run_cli(["dump", *flags(tmp_path)])  # tests/conftest.py: not in a pod
    assert state(parse(res.stdout), "processes.kubelet") == "disabled"


def test_kubelet_socket_missing_in_a_pod_says_to_mount_it(tmp_path: Path) -> None:
    node(tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    s = parse(run_cli(["dump", *flags(tmp_path)], env=env).stdout)
    assert state(s, "processes.kubelet") == "unavailable"
    line, fix = line_and_fix(doctor_lines(flags(tmp_path), env), "processes.kubelet")
    assert f"no kubelet PodResources socket at {tmp_path}/kubelet.sock" in line
    assert fix.startswith("fix: mount the host's /var/lib/kubelet/pod-resources")


def test_a_kubelet_without_the_list_call_is_a_state_not_a_failure(tmp_path: Path) -> None:
    """A gRPC server on the socket that serves no PodResources: every call answers
    UNIMPLEMENTED, as a kubelet without the v1 API does."""
    node(tmp_path)
    sock = tmp_path / "kubelet.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    assert server.add_insecure_port(f"unix://{sock}")
    server.start()
    try:
        with socket.socket(socket.AF_UNIX) as probe:
            probe.connect(str(sock))
        s = parse(run_cli(["dump", *flags(tmp_path, sock)]).stdout)
    finally:
        server.stop(grace=None).wait()
    assert state(s, "processes.kubelet") == "unavailable"
    assert value(s, "gpu_exporter_collector_success", collector="processes") == 1
    assert value(s, "process_gpu_memory_usage_bytes", process_pid="4242") == 1024 * 1024
