"""End to end: the real exporter on the fake 8-GPU NVML scenario with processes, a fake
/proc tree for every process, and a real gRPC PodResources server."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpu_exporter.collectors import REGISTRY
from tests.fake_nvml import scenario as fake
from tests.helpers import (
    Exporter,
    Series,
    eventually,
    exporter,
    find,
    parse,
    promtool_check_metrics,
    value,
)
from tests.processes.kubelet import Container, Pod, kubelet
from tests.processes.procfs import remove_process, write_process

GIB = 1024**3
CID_TRAIN = "a1" * 32
CID_INFER_A = "b2" * 32
CID_INFER_B = "c3" * 32
CID_DOCKER = "d4" * 32
UID_TRAIN = "11111111-2222-4333-8444-555555555555"
UID_INFER_A = "22222222-2222-4333-8444-555555555555"
UID_INFER_B = "33333333-2222-4333-8444-555555555555"


def _k8s(uid: str, cid: str) -> str:
    """cgroup v2, systemd driver, containerd: what a pod's process shows."""
    u = uid.replace("-", "_")
    return (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/"
            f"cri-containerd-{cid}.scope\n")


def now_us() -> int:
    return int(time.time() * 1_000_000)


def uuid(i: int) -> str:
    return fake.h100(i).uuid


def scenario() -> fake.Scenario:
    sc = fake.h100x8()
    d = sc.devices
    # GPU 0: a training process with a compute and a graphics context (same memory).
    d[0].processes = [("compute", 1001, 20 * GIB, None, None),
                      ("graphics", 1001, 20 * GIB, None, None)]
    # NVML stamps samples with the host's clock (µs); the first read asks for the last 15 s.
    now = now_us()
    d[0].process_utilization = [(1001, now - 3_000_000, 50, 30, 0, 10),
                                (1001, now - 2_000_000, 70, 50, 0, 10),
                                (9999, now - 1_500_000, 99, 99, 0, 0)]  # 9999 has exited
    d[1].processes = [("compute", 1002, 10 * GIB, None, None)]
    # GPU 2 is time-sliced between two pods; GPU 3 belongs to infer-a alone.
    d[2].processes = [("compute", 1003, 3 * GIB, None, None),
                      ("compute", 1004, 4 * GIB, None, None)]
    d[3].processes = [("compute", 1005, 5 * GIB, None, None)]
    # GPU 5 is allocated to a pod, but the process on it is a host process.
    d[5].processes = [("compute", 1006, 6 * GIB, None, None)]
    # GPU 6: a plain docker container; NVML cannot tell its memory.
    d[6].processes = [("compute", 1007, None, None, None)]
    d[6].process_utilization = [(1007, now - 3_500_000, 25, 5, 40, 0),
                                (1007, now - 60_000_000, 99, 99, 99, 99)]  # too old
    # GPU 7: a process in a pid namespace this /proc does not show.
    d[7].processes = [("compute", 1008, 8 * GIB, None, None)]
    return sc


def write_procs(procfs: Path) -> None:
    write_process(procfs, 1001, comm="python3", cgroup=_k8s(UID_TRAIN, CID_TRAIN), start=11)
    write_process(procfs, 1002, comm="torchrun", cgroup=_k8s(UID_TRAIN, CID_TRAIN), start=12)
    write_process(procfs, 1003, comm="triton", cgroup=_k8s(UID_INFER_A, CID_INFER_A),
                  start=13)
    write_process(procfs, 1004, comm="triton", cgroup=_k8s(UID_INFER_B, CID_INFER_B),
                  start=14)
    write_process(procfs, 1005, comm="triton", cgroup=_k8s(UID_INFER_A, CID_INFER_A),
                  start=15)
    write_process(procfs, 1006, comm="nvidia-smi", cgroup="0::/user.slice/session-4.scope\n",
                  start=16)
    write_process(procfs, 1007, comm="ffmpeg",
                  cgroup=f"0::/system.slice/docker-{CID_DOCKER}.scope\n", start=17)


PODS = [
    Pod("ml", "train-0", [
        Container("trainer", {"nvidia.com/gpu": [uuid(0), uuid(1)]}, cpu_ids=[1]),
        Container("logger", {"example.com/nic": ["nic-0"]}),
    ]),
    Pod("serving", "infer-a", [Container("server", {
        "nvidia.com/gpu": [uuid(2) + "::0", uuid(3) + "::0"]})]),
    Pod("serving", "infer-b", [Container("server", {"nvidia.com/gpu": [uuid(2) + "::1"]})]),
    Pod("batch", "idle-job", [Container("main", {"nvidia.com/gpu": [uuid(5)]})]),
]


def only_gpu_and_processes() -> list[str]:
    keep = {"nvidia", "processes"}
    return [f"--no-collector.{c.name}" for c in REGISTRY if c.name not in keep] + [
        "--collector.nvidia", "--collector.processes"]


@contextmanager
def running(lib: Path, tmp: Path, sc: fake.Scenario, args: Sequence[str] = ()
            ) -> Iterator[Exporter]:
    path = sc.write(sc.path or tmp / "gpus.scenario")
    with exporter([*only_gpu_and_processes(), f"--path.procfs={tmp / 'proc'}", *args],
                  env=fake.env(lib, path)) as exp:
        yield exp


def procs(series: Sequence[Series], **labels: str) -> list[Series]:
    return find(series, "process_gpu_memory_usage_bytes", **labels)


def test_processes_with_executable_container_and_pod(lib: Path, tmp_path: Path) -> None:
    write_procs(tmp_path / "proc")
    sock = tmp_path / "kubelet.sock"
    with kubelet(sock, PODS), running(
        lib, tmp_path, scenario(),
        [f"--processes.kubelet-socket={sock}", "--processes.kubernetes-device-labels"],
    ) as exp:
        text = exp.scrape()
    promtool_check_metrics(text)
    s = parse(text)
    assert value(s, "gpu_exporter_collector_success", collector="processes") == 1
    assert value(s, "gpu_exporter_feature_status", feature="processes.kubelet",
                 state="enabled") == 1

    train = procs(s, process_pid="1001")
    assert len(train) == 1  # compute + graphics contexts: one process, memory not doubled
    assert train[0].value == 20 * GIB
    assert train[0].labels.items() >= {
        "hw_id": uuid(0), "gpu_index": "0", "hw_name": fake.H100_NAME,
        "process_executable_name": "python3", "container_id": CID_TRAIN,
        "k8s_pod_uid": UID_TRAIN, "k8s_pod_name": "train-0", "k8s_namespace_name": "ml",
        "k8s_container_name": "trainer",
    }.items()
    # Utilization: the mean of the samples since the previous read, by engine.
    util = {x.labels["hw_gpu_task"]: x.value
            for x in find(s, "process_gpu_utilization_ratio", process_pid="1001")}
    assert util == pytest.approx({"general": 0.60, "encoder": 0.0, "decoder": 0.10})
    assert not find(s, "process_gpu_utilization_ratio", process_pid="9999")  # exited

    assert procs(s, process_pid="1002")[0].labels["hw_id"] == uuid(1)
    assert procs(s, process_pid="1002")[0].labels["k8s_pod_name"] == "train-0"

    # Time-sliced GPU 2: infer-a's process is named (its uid was learnt from GPU 3, which
    # is infer-a's alone); infer-b's is known only by its uid: never guessed.
    a = procs(s, process_pid="1003")[0].labels
    assert (a["hw_id"], a["k8s_pod_name"], a["k8s_namespace_name"]) == (
        uuid(2), "infer-a", "serving")
    b = procs(s, process_pid="1004")[0].labels
    # (an empty label is an absent label in Prometheus: it only hides the device's own)
    assert b["k8s_pod_uid"] == UID_INFER_B and b.get("k8s_pod_name", "") == ""
    assert b["container_id"] == CID_INFER_B

    # A host process on a GPU allocated to a pod is not that pod's.
    host = procs(s, process_pid="1006")[0].labels
    assert host["process_executable_name"] == "nvidia-smi"
    assert not {"k8s_pod_uid", "container_id"} & host.keys()
    assert host.get("k8s_pod_name", "") == host.get("k8s_namespace_name", "") == ""

    # Docker without Kubernetes; memory NVML does not report is absent, not 0.
    assert not procs(s, process_pid="1007")
    enc = find(s, "process_gpu_utilization_ratio", process_pid="1007", hw_gpu_task="encoder")
    assert enc[0].value == pytest.approx(0.40)
    assert enc[0].labels["container_id"] == CID_DOCKER
    assert "k8s_pod_uid" not in enc[0].labels

    # A pid this /proc does not show: reported, with what is known (pid and GPU).
    hidden = procs(s, process_pid="1008")[0]
    assert hidden.value == 8 * GIB
    assert "process_executable_name" not in hidden.labels

    # Device series carry their pod (opt-in); a shared GPU lists every pod, in step.
    dev0 = find(s, "hw_gpu_utilization_ratio", hw_id=uuid(0), hw_gpu_task="general")[0]
    assert (dev0.labels["k8s_pod_name"], dev0.labels["k8s_namespace_name"],
            dev0.labels["k8s_container_name"]) == ("train-0", "ml", "trainer")
    dev2 = find(s, "hw_gpu_memory_usage_bytes", hw_id=uuid(2))[0]
    assert dev2.labels["k8s_pod_name"] == "infer-a,infer-b"
    assert dev2.labels["k8s_namespace_name"] == "serving,serving"
    assert find(s, "hw_gpu_up", hw_id=uuid(5))[0].labels["k8s_pod_name"] == "idle-job"
    assert "k8s_pod_name" not in find(s, "hw_gpu_up", hw_id=uuid(4))[0].labels


def test_device_pod_labels_are_opt_in(lib: Path, tmp_path: Path) -> None:
    write_procs(tmp_path / "proc")
    sock = tmp_path / "kubelet.sock"
    with kubelet(sock, PODS), running(lib, tmp_path, scenario(),
                                      [f"--processes.kubelet-socket={sock}"]) as exp:
        s = parse(exp.scrape())
    assert not [x for x in s if x.name.startswith("hw_gpu") and "k8s_pod_name" in x.labels]
    assert procs(s, process_pid="1001")[0].labels["k8s_pod_name"] == "train-0"


def test_between_scrapes_processes_exit_pids_are_reused_and_intervals_advance(
    lib: Path, tmp_path: Path
) -> None:
    procfs = tmp_path / "proc"
    write_procs(procfs)
    sc = scenario()
    sock = tmp_path / "kubelet.sock"
    with kubelet(sock, PODS), running(lib, tmp_path, sc,
                                      [f"--processes.kubelet-socket={sock}"]) as exp:
        first = parse(exp.scrape())
        assert procs(first, process_pid="1002")[0].labels["container_id"] == CID_TRAIN
        assert procs(first, process_pid="1008")

        # 1008 exits; 1002 exits and its pid goes to a new host process on GPU 1;
        # GPU 0 gets one new utilization sample.
        sc.devices[7].processes = []
        remove_process(procfs, 1002)
        write_process(procfs, 1002, comm="bash", cgroup="0::/user.slice/session-9.scope\n",
                      start=999)
        sc.devices[1].processes = [("compute", 1002, 1 * GIB, None, None)]
        sc.devices[0].process_utilization.append((1001, now_us(), 20, 10, 0, 0))
        sc.write()
        second = parse(exp.scrape())

        assert not procs(second, process_pid="1008")
        reused = procs(second, process_pid="1002")[0]
        assert reused.value == 1 * GIB
        assert reused.labels["process_executable_name"] == "bash"
        assert not {"container_id", "k8s_pod_name", "k8s_pod_uid"} & reused.labels.keys()
        # Only the sample newer than the previous read counts.
        assert value(second, "process_gpu_utilization_ratio", process_pid="1001",
                     hw_gpu_task="general") == pytest.approx(0.20)

        # Nothing new: no utilization for the interval (absent, not 0); memory stays.
        third = parse(exp.scrape())
        assert not find(third, "process_gpu_utilization_ratio", process_pid="1001")
        assert procs(third, process_pid="1001")[0].value == 20 * GIB


def test_without_a_kubelet_processes_still_report(lib: Path, tmp_path: Path) -> None:
    write_procs(tmp_path / "proc")
    missing = tmp_path / "no-kubelet.sock"
    with running(lib, tmp_path, scenario(),
                 [f"--processes.kubelet-socket={missing}",
                  "--processes.kubernetes-device-labels"]) as exp:
        s = parse(exp.scrape())
    assert value(s, "gpu_exporter_collector_success", collector="processes") == 1
    assert value(s, "gpu_exporter_feature_status", feature="processes", state="enabled") == 1
    assert value(s, "gpu_exporter_feature_status", feature="processes.kubelet",
                 state="disabled") == 1  # not in a pod: not a Kubernetes node
    assert value(s, "gpu_exporter_feature_status", feature="processes.nvml",
                 state="enabled") == 1
    p = procs(s, process_pid="1001")[0].labels
    assert p["k8s_pod_uid"] == UID_TRAIN and "k8s_pod_name" not in p
    assert p["container_id"] == CID_TRAIN


def test_a_kubelet_that_fails_is_visible_but_processes_still_report(
    lib: Path, tmp_path: Path
) -> None:
    write_procs(tmp_path / "proc")
    sock = tmp_path / "kubelet.sock"
    with running(lib, tmp_path, scenario(), [f"--processes.kubelet-socket={sock}"]) as exp:
        with kubelet(sock, PODS):
            ok = parse(exp.scrape())
        assert value(ok, "gpu_exporter_collector_success", collector="processes") == 1
        # A kubelet that does not answer: its socket is there, nobody listens on it.
        with socket.socket(socket.AF_UNIX) as dead:
            dead.bind(str(sock))
            broken = parse(exp.scrape())
        assert value(broken, "gpu_exporter_collector_success", collector="processes") == 0
        p = procs(broken, process_pid="1001")[0].labels
        assert p["process_executable_name"] == "python3" and "k8s_pod_name" not in p
        assert "kubelet PodResources List" in exp.logs()


def test_mig_processes_are_reported_on_their_mig_device(lib: Path, tmp_path: Path) -> None:
    sc = fake.mig_a100()
    parent = sc.devices[0]
    # NVML lists a MIG process on the parent with its GPU and compute instance ids.
    parent.processes = [("compute", 1001, 2 * GIB, 5, 0), ("compute", 1002, 7 * GIB, 1, 0)]
    write_procs(tmp_path / "proc")
    with running(lib, tmp_path, sc) as exp:
        s = parse(exp.scrape())
    by_slot = {m.gpu_instance_id: m.uuid for m in parent.migs}
    p1 = procs(s, process_pid="1001")[0]
    assert (p1.value, p1.labels["hw_id"], p1.labels["hw_parent"]) == (
        2 * GIB, by_slot[5], parent.uuid)
    assert procs(s, process_pid="1002")[0].labels["hw_id"] == by_slot[1]


def test_nvml_loaded_later_is_picked_up(lib: Path, tmp_path: Path) -> None:
    write_procs(tmp_path / "proc")
    sc = scenario()
    sc.init_error = "DRIVER_NOT_LOADED"
    with running(lib, tmp_path, sc, ["--collector.retry-interval=0.2"]) as exp:
        before = parse(exp.scrape())
        assert value(before, "gpu_exporter_feature_status", feature="processes.nvml",
                     state="unavailable") == 1
        assert not procs(before)
        sc.init_error = None
        sc.write()

        def picked_up() -> list[Series]:
            s = parse(exp.scrape())
            return s if procs(s) else []

        after = eventually(picked_up, 20, "NVML picked up", interval=0.3)
    assert procs(after, process_pid="1001")[0].value == 20 * GIB
    assert value(after, "gpu_exporter_feature_status", feature="processes.nvml",
                 state="enabled") == 1


def test_acceptance_8_gpus_processes_pods_and_host(lib: Path, tmp_path: Path) -> None:
    """Issue 7's "done when": every default collector on the fake 8-GPU node with
    processes and a kubelet; the host metrics read the real kernel files through the
    same --path.procfs (as a container that mounts the host's /proc does)."""
    procfs = tmp_path / "proc"
    write_procs(procfs)
    for name in ("stat", "meminfo", "diskstats", "self", "uptime", "cpuinfo"):
        (procfs / name).symlink_to(f"/proc/{name}")
    sock = tmp_path / "kubelet.sock"
    path = scenario().write(tmp_path / "gpus.scenario")
    args = [f"--path.procfs={procfs}", f"--processes.kubelet-socket={sock}",
            "--processes.kubernetes-device-labels"]
    with kubelet(sock, PODS), exporter(args, env=fake.env(lib, path)) as exp:
        text = exp.scrape()
    promtool_check_metrics(text)
    s = parse(text)
    for collector in ("nvidia", "processes", "host"):
        assert value(s, "gpu_exporter_collector_success", collector=collector) == 1, collector
    assert len(find(s, "hw_gpu_up")) == 8
    assert find(s, "hw_gpu_up", hw_id=uuid(0))[0].labels["k8s_pod_name"] == "train-0"
    mem = procs(s, process_pid="1001")[0].labels
    assert (mem["process_executable_name"], mem["container_id"], mem["k8s_pod_name"]) == (
        "python3", CID_TRAIN, "train-0")
    assert find(s, "process_gpu_utilization_ratio", process_pid="1001", hw_gpu_task="general")
    # The memory states partition the total, which /proc/meminfo states exactly.
    mem_total = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    states = find(s, "system_memory_usage_bytes")
    assert {x.labels["system_memory_state"] for x in states} == {
        "used", "free", "buffers", "cached"}
    assert sum(x.value for x in states) == mem_total
    assert find(s, "system_network_io_bytes_total")
    assert find(s, "system_filesystem_usage_bytes", system_filesystem_mountpoint="/")
