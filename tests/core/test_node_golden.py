"""One node with every collector that runs on fakes, its whole exposition pinned: the fake
NVML (an H100 with processes, an A100 in MIG mode), AMD and Intel cards from real sysfs
captures, a Gaudi 2 on the fake HLML (tests/fake_hlml) with its PCI function in sysfs,
GPU processes in a fake /proc (NVML and DRM fdinfo clients) inside a pod that a
real gRPC PodResources server names, the host's CPU, memory and filesystems from that
/proc, and the node's RAPL zones and ACPI power meter. Every series is checked against its
label schema as it is produced (tests/conftest.py); this test pins what a scrape of such a
node is, line by line.

Left out, and why: the eBPF families need real uprobes and a CUDA workload (tests/ebpf);
network interfaces are the host's real ones (tests/host measures them over a veth pair).

Regenerate with `UPDATE_GOLDEN=1 .venv/bin/pytest tests/core/test_node_golden.py`, then
review the diff. Values that are the host's (statvfs of its filesystems, durations, build
info) are normalised.
"""

from __future__ import annotations

import re
from pathlib import Path

from gpu_exporter.collectors import REGISTRY
from tests.fake_hlml import scenario as fake_hlml
from tests.fake_nvml import scenario as fake
from tests.helpers import promtool_check_metrics, run_cli
from tests.host import power_tree
from tests.nvidia import golden
from tests.processes.kubelet import Container, Pod, kubelet
from tests.processes.podtree import pod_cgroup, pod_log_dir
from tests.processes.procfs import write_process
from tests.sysfs.tree import FakeSysfs, card_switch, raw_text, root_port

AMD, INTEL, GAUDI = "0000:0c:00.0", "0000:03:00.0", "0000:b3:00.0"
UID = "5b0e5c1e-2222-4333-8444-555555555555"
CID = "c0" * 32
GIB = 1024**3


def _fdinfo(driver: str, address: str, client: int, vram_kib: int) -> str:
    engine = "drm-engine-gfx" if driver == "amdgpu" else "drm-engine-render"
    return (f"pos:\t0\nflags:\t02100002\ndrm-driver:\t{driver}\ndrm-pdev:\t{address}\n"
            f"drm-client-id:\t{client}\ndrm-memory-vram:\t{vram_kib} KiB\n"
            f"{engine}:\t1000000 ns\n")


def _node(tmp: Path) -> tuple[fake.Scenario, Path, Path]:
    h100 = fake.h100(0)
    h100.processes = [("compute", 4001, 20 * GIB, None, None),
                      ("graphics", 4002, 1 * GIB, None, None)]
    mig = fake.mig_a100().devices[0]
    sc = fake.Scenario(devices=[h100, mig])
    sysfs = FakeSysfs(tmp / "sys")
    # both cards below their own PCIe switch, in the slots of an AMD CPU
    sysfs.add("rx6900xt", AMD, 0, ports=(
        root_port("0000:00:03.1", "1022:1483", "16.0 GT/s PCIe", 16, ("16.0 GT/s PCIe", 16)),
        *card_switch("navi21", "0000:0a:00.0", "0000:0b:00.0", slot=("16.0 GT/s PCIe", 16),
                     inner=("16.0 GT/s PCIe", 16))))
    sysfs.add("b580", INTEL, 1, ports=(
        root_port("0000:00:01.1", "1022:1483", "16.0 GT/s PCIe", 16, ("16.0 GT/s PCIe", 8)),
        *card_switch("bmg", "0000:01:00.0", "0000:02:01.0", slot=("16.0 GT/s PCIe", 8),
                     inner=("2.5 GT/s PCIe", 1))))
    sysfs.add_accel("gaudi2", GAUDI, 0)
    proc = tmp / "proc"
    pod = (f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/"
           f"cri-containerd-{CID}.scope\n")
    write_process(proc, 4001, comm="python3", cgroup=pod, start=10)
    write_process(proc, 4002, comm="Xorg", cgroup="0::/system.slice/display.service\n",
                  start=11)
    write_process(proc, 5001, comm="rocm-train", cgroup=pod, start=12,
                  fdinfo={5: _fdinfo("amdgpu", AMD, 21, 256 * 1024)})
    write_process(proc, 5002, comm="ollama", start=13,
                  fdinfo={4: _fdinfo("xe", INTEL, 3, 64 * 1024)})
    # the Gaudi's one user holds its accel node (docs/gaudi.md, "Per process")
    write_process(proc, 6001, comm="pt-gaudi", cgroup=pod, start=14)
    (proc / "6001" / "fd").mkdir()
    (proc / "6001" / "fd" / "9").symlink_to("/dev/accel/accel0")
    (proc / "stat").write_text(
        "cpu  1000 20 300 8000 100 0 50 0 0 0\ncpu0 1000 20 300 8000 100 0 50 0 0 0\n"
        "intr 0\nctxt 0\nbtime 1700000000\nprocesses 10\nprocs_running 1\n"
        "procs_blocked 0\n")
    (proc / "meminfo").write_text(
        "MemTotal:       16384000 kB\nMemFree:         4096000 kB\n"
        "MemAvailable:    8192000 kB\nBuffers:          512000 kB\n"
        "Cached:          2048000 kB\nSwapCached:            0 kB\n"
        "Active:          4096000 kB\nInactive:        2048000 kB\n"
        "SReclaimable:     256000 kB\nShmem:             64000 kB\n"
        "SwapTotal:             0 kB\nSwapFree:              0 kB\n")
    (proc / "diskstats").write_text("")
    (proc / "self").mkdir()
    # the node's own power: an AMD EPYC's RAPL zones and the BMC's whole-system meter
    power_tree.amd_epyc(sysfs.root, start_uj=40_000_000_000)
    power_tree.power_meter(sysfs.root, 10, 0, "", 1_450_000_000)
    (proc / "self" / "mounts").write_text(f"/dev/fake0 {tmp} ext4 rw,relatime 0 0\n")
    return sc, sysfs.root, proc


_VOLATILE = re.compile(r"^(system_filesystem_usage_bytes)[{ ]")


def _normalise(text: str, tmp: Path) -> str:
    out = []
    for line in golden.normalise(text, keep_collectors=None).splitlines():
        line = line.replace(str(tmp), "TMP")
        if _VOLATILE.match(line):
            line = line.rsplit(" ", 1)[0] + " VOLATILE"
        out.append(line)
    return "\n".join(out) + "\n"


def test_a_node_with_every_collector_on_fakes(tmp_path: Path) -> None:
    sc, sysfs, proc = _node(tmp_path)
    sock = tmp_path / "kubelet.sock"
    pods = [Pod("ml", "train-0", [Container("main", {
        "nvidia.com/gpu": [sc.devices[0].uuid], "amd.com/gpu": [AMD]})])]
    on = [c.name for c in REGISTRY if c.name != "ebpf"]
    args = ["dump", *(f"--collector.{name}" for name in on), "--no-collector.ebpf",
            f"--path.sysfs={sysfs}", f"--path.procfs={proc}",
            f"--processes.kubelet-socket={sock}", "--processes.kubernetes-device-labels",
            f"--processes.pod-log-dir={tmp_path / 'pods'}",
            "--host.network-interfaces-exclude=.*"]
    # The node shows the pod running: its log directory and a populated cgroup.
    pod_log_dir(tmp_path / "pods", "ml", "train-0", UID)
    pod_cgroup(Path(sysfs), "v2-systemd", UID, running=True)
    hlml = fake_hlml.Scenario(devices=[fake_hlml.gaudi2(0, GAUDI)])
    args.append(f"--gaudi.hlml-library={fake_hlml.build()}")
    env = {**fake.env(fake.build(), sc.write(tmp_path / "node.scenario")),
           fake_hlml.ENV_VAR: str(hlml.write(tmp_path / "hlml.scenario")),
           "OTEL_SERVICE_NAME": "gpu-node", "OTEL_RESOURCE_ATTRIBUTES": "team=ml"}
    with kubelet(sock, pods):
        res = run_cli(args, env=env)
    assert res.returncode == 0, res.stderr
    promtool_check_metrics(res.stdout)
    assert raw_text("rx6900xt", "device/unique_id") in res.stdout  # the AMD card is there
    assert f'gpu_pci_address="{GAUDI}"' in res.stdout and "hw_vendor=\"habana\"" in res.stdout
    golden.check("node", _normalise(res.stdout, tmp_path), normalised=True)
