"""GPUs handed out through Kubernetes DRA: the kubelet reports a claim's CDI devices
(dynamic_resources, kubelet 1.34+), the exporter resolves them with the node's CDI spec
files and the NVIDIA driver's minor numbers, and k8s_gpu_allocation_info names the claim.

The specs follow NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu at 9593204,
cmd/gpu-kubelet-plugin/cdi.go): a transient spec per claim in /var/run/cdi
(`CreateClaimSpecFile`, written by `writeSpec` as `<GenerateTransientSpecName>.yaml`:
`k8s.gpu.nvidia.com-claim_<claim uid>.yaml`), kind `k8s.gpu.nvidia.com/claim`, devices
`<claim uid>-<canonical name>` (`gpu-<minor>`, cmd/gpu-kubelet-plugin/deviceinfo.go; a MIG
device `gpu-<parent minor>-mig-<profile>-<profile id>-<placement>`, mig.go
`ToCanonicalName`) carrying the GPU's `/dev/nvidia<minor>` only (no NVIDIA_VISIBLE_DEVICES
UUIDs), the control nodes in the spec's common edits. A MIG device carries its parent's
node and two character devices `/dev/nvidia-caps/nvidia-cap<N>` (`GetDevNodesForMigDevice`,
internal/common/nvcaps.go `CDICharDevNode`: type c, major, minor, fileMode), numbered as
`/proc/driver/nvidia-caps/mig-minors` says (the comment in internal/common/nvcaps.go
quotes it). The driver's /proc tree is the H100 host's (tests/fixtures/procfs/
nvidia-h100x8: minors 0.. by bus, UUIDs as the fake NVML's)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from gpu_exporter.collectors import REGISTRY
from gpu_exporter.readers.kubelet import cdi, podresources
from tests.fake_nvml import scenario as fake
from tests.helpers import (
    Exporter,
    Series,
    eventually,
    exporter,
    find,
    parse,
    promtool_check_metrics,
    run_cli,
    value,
)
from tests.nvidia import driverfs
from tests.processes.kubelet import Claim, Container, FakeKubelet, Pod, kubelet
from tests.processes.procfs import write_process

CLAIM_UID = "7a1f2b3c-0000-4000-8000-00000000c1a1"
VENDOR = "k8s.gpu.nvidia.com"


def uuid(i: int) -> str:
    return fake.h100(i).uuid


CAPS_MAJOR = 508  # nvidia-caps' major in /proc/devices: dynamic, any number will do
GIB = 1024**3


def mig_minors(gpus: int = 8) -> str:
    """`/proc/driver/nvidia-caps/mig-minors` as the driver writes it: `config` 1,
    `monitor` 2, then per GPU minor 15 GPU instances of one access line and 8 compute
    instances each (gpu3/gi3/ci3/access is 439 and gpu6/gi11/ci7/access 920, as the
    DRA driver's internal/common/nvcaps.go quotes a real file)."""
    lines = ["config 1", "monitor 2"]
    for gpu in range(gpus):
        for gi in range(15):
            base = 3 + gpu * 135 + gi * 9
            lines.append(f"gpu{gpu}/gi{gi}/access {base}")
            lines += [f"gpu{gpu}/gi{gi}/ci{ci}/access {base + 1 + ci}" for ci in range(8)]
    return "\n".join(lines) + "\n"


def cap_minor(gpu: int, gi: int, ci: int | None = None) -> int:
    return 3 + gpu * 135 + gi * 9 + (0 if ci is None else 1 + ci)


def _cap_node(minor: int, root: str = "") -> dict[str, object]:
    path = f"/dev/nvidia-caps/nvidia-cap{minor}"
    return {"path": path, "hostPath": root + path, "type": "c", "major": CAPS_MAJOR,
            "minor": minor, "fileMode": 0o444}


def _gpu_node(minor: int, root: str = "") -> dict[str, object]:
    path = f"/dev/nvidia{minor}"
    return {"path": path, "hostPath": root + path}


def drm_nodes(sysfs: Path, pci: str, *nodes: str) -> None:
    """/sys/class/drm/<node>/device -> the GPU's PCI device, as the DRM core links it."""
    device = sysfs / "devices" / "pci0000:00" / pci
    device.mkdir(parents=True, exist_ok=True)
    for node in nodes:
        (sysfs / "class" / "drm" / node).mkdir(parents=True)
        (sysfs / "class" / "drm" / node / "device").symlink_to(device)


def nvidia_claim_spec(folder: Path, claim_uid: str, minors: dict[str, int],
                      migs: dict[str, tuple[int, int, int]] | None = None,
                      driver_root: str = "", drm: dict[int, tuple[str, ...]] | None = None
                      ) -> Path:
    """The transient spec of one claim: full GPUs by name -> minor, MIG devices by name
    -> (parent minor, GPU instance, compute instance). Every node's hostPath is its path
    under the driver's root (writeSpec's root transform: nvcdi/transform/root
    host-root.go), "" for a driver installed on the host, /run/nvidia/driver for the
    GPU operator's driver container. `drm`: a GPU's DRM nodes by minor, which the
    toolkit adds where nvidia-drm is loaded (internal/platform-support/dgpu/nvml.go)."""
    folder.mkdir(parents=True, exist_ok=True)
    root = driver_root
    devices = [{"name": f"{claim_uid}-{name}", "containerEdits": {"deviceNodes": [
        _gpu_node(minor, root),
        *({"path": f"/dev/dri/{n}", "hostPath": f"{root}/dev/dri/{n}"}
          for n in (drm or {}).get(minor, ()))]}}
               for name, minor in minors.items()]
    devices += [{"name": f"{claim_uid}-{name}", "containerEdits": {"deviceNodes": [
        _gpu_node(gpu, root), _cap_node(cap_minor(gpu, gi), root),
        _cap_node(cap_minor(gpu, gi, ci), root)]}}
        for name, (gpu, gi, ci) in (migs or {}).items()]
    spec = {
        "cdiVersion": "0.5.0",
        "kind": f"{VENDOR}/claim",
        "devices": devices,
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": [{"path": p, "hostPath": root + p}
                            for p in ("/dev/nvidiactl", "/dev/nvidia-uvm")]},
    }
    path = folder / f"{VENDOR}-claim_{claim_uid}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@contextmanager
def _node(lib: Path, tmp: Path, pods: list[Pod], sc: fake.Scenario | None = None
          ) -> Iterator[tuple[Exporter, FakeKubelet, Path]]:
    """The exporter (NVIDIA and processes collectors) on the H100 host's driver tree,
    the fake kubelet serving `pods`; yields the exporter, the kubelet and the /proc."""
    flags, env, proc = _node_flags(lib, tmp, sc)
    with kubelet(tmp / "kubelet.sock", pods) as kube, exporter(flags, env=env) as exp:
        yield exp, kube, proc


def _node_flags(lib: Path, tmp: Path, sc: fake.Scenario | None = None
                ) -> tuple[list[str], dict[str, str], Path]:
    """The flags and environment of _node's exporter, and its /proc."""
    sc = sc or fake.Scenario(devices=[fake.h100(i) for i in range(3)])
    path = sc.write(tmp / "gpus.scenario")
    sock = tmp / "kubelet.sock"
    proc = tmp / "proc" if (tmp / "proc").exists() else driverfs.procfs(tmp)
    keep = {"nvidia", "processes"}
    flags = [*(f"--no-collector.{c.name}" for c in REGISTRY if c.name not in keep),
             "--collector.nvidia", "--collector.processes",
             f"--processes.kubelet-socket={sock}", f"--path.procfs={proc}",
             f"--path.sysfs={tmp / 'sys'}",
             f"--processes.cdi-spec-dirs={tmp / 'etc-cdi'},{tmp / 'run-cdi'}"]
    (tmp / "sys").mkdir(exist_ok=True)
    return flags, fake.env(lib, path), proc


def _scrape(lib: Path, tmp: Path, pods: list[Pod]) -> list[Series]:
    with _node(lib, tmp, pods) as (exp, _, _):
        text = exp.scrape()
    promtool_check_metrics(text)
    return parse(text)


def _allocations(series: list[Series]) -> set[tuple[str, ...]]:
    return {(s.labels["hw_id"], s.labels["k8s_pod_name"],
             s.labels.get("k8s_resourceclaim_name", ""))
            for s in find(series, "k8s_gpu_allocation_info") if s.value == 1}


def _dra_state(series: list[Series]) -> list[str]:
    return [s.labels["state"] for s in find(series, "gpu_exporter_feature_status",
                                            feature="processes.dra") if s.value == 1]


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fake.build(tmp_path_factory.mktemp("fake-nvml"))


def test_a_mixed_node_device_plugin_and_dra(lib: Path, tmp_path: Path) -> None:
    """A device plugin's GPU and a claim's, on one node; the claim's GPU carries its DRM
    nodes (nvidia-drm loaded) beside /dev/nvidia1: one GPU, not two."""
    nvidia_claim_spec(tmp_path / "run-cdi", CLAIM_UID, {"gpu-1": 1},
                      drm={1: ("card2", "renderD129")})
    drm_nodes(tmp_path / "sys", "0000:2a:00.0", "card2", "renderD129")  # minor 1's
    pods = [
        Pod("ml", "train-0", [Container("trainer", {"nvidia.com/gpu": [uuid(0)]})]),
        Pod("ml", "dra-0", [Container("main", claims=[Claim(
            "ml", "single-gpu", "gpu.nvidia.com", (f"{VENDOR}/claim={CLAIM_UID}-gpu-1",),
            pool="node1", device="gpu-1")])]),
    ]
    s = _scrape(lib, tmp_path, pods)
    assert _allocations(s) == {(uuid(0), "train-0", ""), (uuid(1), "dra-0", "single-gpu")}
    assert _dra_state(s) == ["enabled"]


def test_an_unresolvable_dra_device_is_counted_never_guessed(lib: Path,
                                                              tmp_path: Path) -> None:
    nvidia_claim_spec(tmp_path / "run-cdi", CLAIM_UID, {"gpu-1": 1})
    (tmp_path / "etc-cdi").mkdir()
    (tmp_path / "etc-cdi" / "broken.yaml").write_text("kind: [unclosed\n")  # malformed
    pods = [Pod("ml", "dra-0", [Container("main", claims=[
        Claim("ml", "single-gpu", "gpu.nvidia.com", (f"{VENDOR}/claim={CLAIM_UID}-gpu-1",)),
        # a device no spec holds (its claim released, the spec removed)
        Claim("ml", "gone", "gpu.nvidia.com", (f"{VENDOR}/claim=0000-gpu-7",))])])]
    s = _scrape(lib, tmp_path, pods)
    assert _allocations(s) == {(uuid(1), "dra-0", "single-gpu")}
    assert _dra_state(s) == ["unavailable"]
    assert value(s, "gpu_exporter_dra_devices_unresolved") == 1


def test_a_hostile_spec_is_skipped_and_named_and_the_claim_stays_resolved(
        lib: Path, tmp_path: Path) -> None:
    """Issue #32: a 400 KB spec of nested brackets raised RecursionError out of the CDI
    reader, the collector failed every scrape and k8s_gpu_allocation_info went to 0.
    Now the file is skipped and named in `processes.cdi_specs` (and doctor); the claim
    of the real spec beside it resolves, `processes.dra` stays enabled."""
    nvidia_claim_spec(tmp_path / "run-cdi", CLAIM_UID, {"gpu-1": 1})
    (tmp_path / "etc-cdi").mkdir()
    (tmp_path / "etc-cdi" / "nested.json").write_bytes(b"[" * 200_000 + b"]" * 200_000)
    pods = [Pod("ml", "dra-0", [Container("main", claims=[Claim(
        "ml", "single-gpu", "gpu.nvidia.com", (f"{VENDOR}/claim={CLAIM_UID}-gpu-1",))])])]
    with _node(lib, tmp_path, pods) as (exp, _, _):
        s = parse(exp.scrape())
        assert _allocations(s) == {(uuid(1), "dra-0", "single-gpu")}
        assert value(s, "gpu_exporter_collector_success", collector="processes") == 1
        assert _dra_state(s) == ["enabled"]
        [specs] = [x for x in find(s, "gpu_exporter_feature_status",
                                   feature="processes.cdi_specs") if x.value == 1]
        assert specs.labels["state"] == "unavailable"
        assert _allocations(parse(exp.scrape())) == {(uuid(1), "dra-0", "single-gpu")}
        logs = exp.logs()
    assert "RecursionError" not in logs and "Traceback" not in logs
    flags, env, _ = _node_flags(lib, tmp_path)
    with kubelet(tmp_path / "kubelet.sock", pods):
        doctor = run_cli(["doctor", *flags], env=env).stdout
    assert f"{tmp_path / 'etc-cdi' / 'nested.json'}: not read: nested deeper than 32" \
        in doctor, doctor


def test_a_kubelet_without_dra_fields_gives_no_dra_state(lib: Path, tmp_path: Path) -> None:
    pods = [Pod("ml", "train-0", [Container("trainer", {"nvidia.com/gpu": [uuid(0)]})])]
    s = _scrape(lib, tmp_path, pods)
    assert _allocations(s) == {(uuid(0), "train-0", "")}
    assert _dra_state(s) == []
    assert not find(s, "gpu_exporter_dra_devices_unresolved")  # no claim: no count


def test_cdi_specs_malformed_duplicated_and_amd(tmp_path: Path) -> None:
    """The reader alone: a malformed file and a name given twice are problems (the
    duplicate is left out, never one of the two guessed); AMD's /etc/cdi spec resolves
    through sysfs, its shared /dev/kfd names no GPU."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "bad.json").write_text("{")
    amd = {"cdiVersion": "0.6.0", "kind": "amd.com/gpu", "devices": [
        {"name": "gpu-0", "containerEdits": {"deviceNodes": [
            {"path": "/dev/dri/card1"}, {"path": "/dev/dri/renderD128"},
            {"path": "/dev/kfd"}]}}]}
    (etc / "amd.json").write_text(json.dumps(amd))
    (etc / "amd-copy.json").write_text(json.dumps(amd))
    (etc / "other.json").write_text(json.dumps({**amd, "kind": "amd.com/gpu2"}))
    sysfs = tmp_path / "sys"
    pci = sysfs / "devices" / "pci0000:00" / "0000:0c:00.0"
    pci.mkdir(parents=True)
    for node in ("card1", "renderD128"):
        (sysfs / "class" / "drm" / node).mkdir(parents=True)
        (sysfs / "class" / "drm" / node / "device").symlink_to(pci)
    devices = cdi.load([str(etc)])
    assert any("bad.json" in p for p in devices.problems)
    assert any("amd.com/gpu=gpu-0 also in" in p for p in devices.problems)
    resolve = cdi.resolver(devices, str(sysfs), {})
    assert resolve("amd.com/gpu=gpu-0") is None  # duplicated: ambiguous
    assert resolve("amd.com/gpu2=gpu-0") == "0000:0c:00.0"


AMD_KIND = "k8s.gpu.amd.com/gpu"


def amd_claim_specs(etc: Path, claim_uid: str, cards: dict[str, tuple[int, int]]) -> None:
    """AMD's DRA driver (ROCm/k8s-gpu-dra-driver at 2622427, cmd/gpu-kubeletplugin):
    `--cdi-root` /etc/cdi (main.go); a `common` device of environment only
    (cdi.go CreateCommonSpecFile, transient spec `k8s.gpu.amd.com-gpu_common`) and a
    spec per claim (CreateClaimSpecFile, `k8s.gpu.amd.com-gpu_<claim uid>`) whose devices
    `<claim uid>-gpu-<card>-<renderD>` carry /dev/kfd, /dev/dri/card<N> and
    /dev/dri/renderD<M>, each with its hostPath (state.go applyConfig)."""
    etc.mkdir(parents=True, exist_ok=True)
    common = {"cdiVersion": "0.3.0", "kind": AMD_KIND, "devices": [
        {"name": "common",
         "containerEdits": {"env": ["DRA_RESOURCE_DRIVER_NAME=gpu.amd.com"]}}]}
    (etc / "k8s.gpu.amd.com-gpu_common.yaml").write_text(yaml.safe_dump(common))

    def node(path: str, major: int, minor: int) -> dict[str, object]:
        return {"path": path, "hostPath": path, "type": "c", "major": major,
                "minor": minor, "permissions": "rw"}

    spec = {"cdiVersion": "0.3.0", "kind": AMD_KIND, "devices": [
        {"name": f"{claim_uid}-{name}", "containerEdits": {"deviceNodes": [
            node("/dev/kfd", 235, 0), node(f"/dev/dri/card{card}", 226, card),
            node(f"/dev/dri/renderD{render}", 226, render)]}}
        for name, (card, render) in cards.items()]}
    (etc / f"k8s.gpu.amd.com-gpu_{claim_uid}.yaml").write_text(yaml.safe_dump(spec))


def test_amd_claims_their_common_device_and_other_drivers(tmp_path: Path) -> None:
    """What the kubelet reports, resolved (the fake kubelet's own messages, no server):
    AMD's driver names each device twice, `common` and the GPU's own, and the device is
    that GPU; a NIC driver's claim that names no GPU is not counted; a GPU driver's
    device with no CDI device, or whose spec is gone, is."""
    etc = tmp_path / "etc"
    uid = "4b8e9f10-0000-4000-8000-0000000a3d01"
    amd_claim_specs(etc, uid, {"gpu-1-128": (1, 128)})
    sysfs = tmp_path / "sys"
    pci = sysfs / "devices" / "pci0000:00" / "0000:0c:00.0"
    pci.mkdir(parents=True)
    for node in ("card1", "renderD128"):
        (sysfs / "class" / "drm" / node).mkdir(parents=True)
        (sysfs / "class" / "drm" / node / "device").symlink_to(pci)
    nic = tmp_path / "run"
    nic.mkdir()
    (nic / "dra.net-nic_x.yaml").write_text(yaml.safe_dump({
        "cdiVersion": "0.5.0", "kind": "dra.net/nic", "devices": [{"name": "x-eth1",
            "containerEdits": {"deviceNodes": [{"path": "/dev/infiniband/uverbs0"}]}}]}))
    pods = [Pod("ml", "rocm-0", [Container("main", claims=[
        Claim("ml", "one-mi300", "gpu.amd.com",
              (f"{AMD_KIND}=common", f"{AMD_KIND}={uid}-gpu-1-128"),
              pool="node1", device="gpu-1-128"),
        Claim("ml", "rdma", "dra.net", ("dra.net/nic=x-eth1",), pool="node1",
              device="eth1"),
        Claim("ml", "gone", "gpu.amd.com", (f"{AMD_KIND}=common", f"{AMD_KIND}=0000-gpu-2-129")),
        Claim("ml", "no-cdi", "gpu.amd.com", (), pool="node1", device="gpu-9-136"),
    ])])]
    response = FakeKubelet(pods).List(None, None)
    resolve = cdi.resolver(cdi.load([str(etc), str(nic)]), str(sysfs), {})
    found = podresources.with_dynamic_resources(response, resolve)
    assert found.by_device == {"0000:0c:00.0": (
        podresources.ContainerRef("ml", "rocm-0", "main", "one-mi300"),)}
    assert [u.split(":")[0] for u in found.unresolved] == ["ml/gone", "ml/no-cdi"]
    assert "gpu.amd.com node1/gpu-9-136 (no CDI device)" in found.unresolved[1]


def _mig_host(tmp: Path) -> fake.Scenario:
    """The MIG H100 (GPU instance 1 with one compute instance, GPU instance 2 with two)
    as minor 0 of the H100 host, with the driver's mig-minors file."""
    sc = fake.mig_h100()
    proc = driverfs.procfs(tmp)
    driverfs.set_uuid(proc, "0000:18:00.0", sc.devices[0].uuid)  # minor 0
    (proc / "driver" / "nvidia-caps").mkdir()
    (proc / "driver" / "nvidia-caps" / "mig-minors").write_text(mig_minors())
    return sc


def test_mig_devices_through_dra_resolve_to_the_mig_device_not_its_parent(
        lib: Path, tmp_path: Path) -> None:
    """Two claims, each of one MIG device of the same parent: GPU instance 1's compute
    instance, and the second compute instance of GPU instance 2 (its GPU instance's
    capability node is GPU instance 2's, shared with the first). Each joins its own MIG
    device; the parent, whose /dev/nvidia0 both carry, is allocated to nobody."""
    sc = _mig_host(tmp_path)
    parent = sc.devices[0]
    first, second = f"{CLAIM_UID[:-1]}1", f"{CLAIM_UID[:-1]}2"
    # the GPU operator's driver container: host paths under /run/nvidia/driver
    nvidia_claim_spec(tmp_path / "run-cdi", first, {}, {"gpu-0-mig-3g40gb-9-0": (0, 1, 0)},
                      driver_root="/run/nvidia/driver")
    nvidia_claim_spec(tmp_path / "run-cdi", second, {},
                      {"gpu-0-mig-1c2g20gb-14-4": (0, 2, 1)},
                      driver_root="/run/nvidia/driver")
    pods = [
        Pod("ml", "mig-a", [Container("main", claims=[Claim(
            "ml", "mig-3g", "gpu.nvidia.com", (f"{VENDOR}/claim={first}-gpu-0-mig-3g40gb-9-0",),
            pool="node1", device="gpu-0-mig-3g40gb-9-0")])]),
        Pod("ml", "mig-b", [Container("main", claims=[Claim(
            "ml", "mig-1c", "gpu.nvidia.com",
            (f"{VENDOR}/claim={second}-gpu-0-mig-1c2g20gb-14-4",))])]),
    ]
    want = {(parent.migs[0].uuid, "mig-a", "mig-3g"), (parent.migs[2].uuid, "mig-b", "mig-1c")}

    def resolved(exp: Exporter) -> str | None:
        text = exp.scrape()  # the MIG devices are NVML's: known once it has found them
        return text if _allocations(parse(text)) == want else None

    with _node(lib, tmp_path, pods, sc) as (exp, _, _):
        text = eventually(lambda: resolved(exp), 60, "both MIG devices allocated")
    promtool_check_metrics(text)
    s = parse(text)
    assert _dra_state(s) == ["enabled"]
    assert value(s, "gpu_exporter_dra_devices_unresolved") == 0


def test_a_claim_released_while_its_process_runs(lib: Path, tmp_path: Path) -> None:
    """The driver deletes the claim's spec when the kubelet unprepares it; a process can
    outlive that (a CUDA context being torn down), and the kubelet may still list the
    claim until the pod is deleted. Meanwhile the process keeps its series, the GPU is
    allocated to nobody (never to the claim whose spec is gone, never guessed), the
    device is counted unresolved, and once the kubelet forgets the claim all is well
    again: no failed scrape, no traceback."""
    sc = fake.Scenario(devices=[fake.h100(i) for i in range(3)])
    sc.devices[1].processes = [("compute", 4242, 2 * GIB, None, None)]
    proc = driverfs.procfs(tmp_path)
    write_process(proc, 4242, comm="trainer", start=42)
    spec = nvidia_claim_spec(tmp_path / "run-cdi", CLAIM_UID, {"gpu-1": 1})
    claim = Claim("ml", "single-gpu", "gpu.nvidia.com", (f"{VENDOR}/claim={CLAIM_UID}-gpu-1",))
    pods = [Pod("ml", "dra-0", [Container("main", claims=[claim])])]

    def scrape(exp: Exporter) -> list[Series]:
        text = exp.scrape()
        promtool_check_metrics(text)
        s = parse(text)
        assert value(s, "gpu_exporter_collector_success", collector="processes") == 1
        assert [x.value for x in find(s, "process_gpu_memory_usage_bytes",
                                      process_pid="4242")] == [2 * GIB]
        return s

    def dra_state(exp: Exporter, state: str) -> list[Series] | None:
        s = scrape(exp)
        return s if _dra_state(s) == [state] else None

    with _node(lib, tmp_path, pods, sc) as (exp, kube, _):
        s = eventually(lambda: scrape(exp), 60, "the process and its claim")
        assert _allocations(s) == {(uuid(1), "dra-0", "single-gpu")}
        assert value(s, "gpu_exporter_dra_devices_unresolved") == 0
        spec.unlink()  # NodeUnprepareResources: DeleteClaimSpecFile
        s = eventually(lambda: dra_state(exp, "unavailable"), 60,
                       "the released claim's device counted unresolved")
        assert _allocations(s) == set()
        assert value(s, "gpu_exporter_dra_devices_unresolved") == 1
        kube.pods = []  # the pod deleted: the kubelet no longer lists the claim
        s = eventually(lambda: dra_state(exp, "enabled"), 60,
                       "no DRA device left unresolved")
        assert _allocations(s) == set()
        assert value(s, "gpu_exporter_dra_devices_unresolved") == 0
        logs = exp.logs()
    assert "Traceback" not in logs, logs


def test_mig_capability_nodes_that_name_no_known_mig_device_are_unresolved(
        tmp_path: Path) -> None:
    """The reader alone: a capability minor the driver's file lacks, two compute
    instances in one device, a compute instance of another GPU instance than the one
    given, a MIG device NVML does not know, a GPU whose minor the driver does not list:
    each unresolved, never the parent."""
    run = tmp_path / "run"
    uid = "c1a1"
    nvidia_claim_spec(run, uid, {"gpu-0": 0, "not-there": 42}, {
        "ok": (0, 1, 0), "unknown-to-nvml": (0, 3, 0)}, driver_root="/run/nvidia/driver")
    spec_path = run / f"{VENDOR}-claim_{uid}.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    spec["devices"] += [
        {"name": f"{uid}-not-in-file", "containerEdits": {"deviceNodes": [
            {"path": "/dev/nvidia0"}, _cap_node(99999)]}},
        {"name": f"{uid}-two-cis", "containerEdits": {"deviceNodes": [
            _cap_node(cap_minor(0, 2, 0)), _cap_node(cap_minor(0, 2, 1))]}},
        {"name": f"{uid}-mismatched", "containerEdits": {"deviceNodes": [
            _cap_node(cap_minor(0, 1)), _cap_node(cap_minor(0, 2, 0))]}},
        {"name": f"{uid}-gi-only", "containerEdits": {"deviceNodes": [
            _cap_node(cap_minor(0, 1))]}},
    ]
    spec_path.write_text(yaml.safe_dump(spec))
    proc = tmp_path / "proc" / "driver" / "nvidia-caps"
    proc.mkdir(parents=True)
    (proc / "mig-minors").write_text(mig_minors(2))
    caps = cdi.read_mig_minors(str(tmp_path / "proc"))
    assert caps[439 - 3 * 135] == cdi.MigCap(0, 3, 3)  # the file's formula, GPU 0
    assert caps[cap_minor(1, 0)] == cdi.MigCap(1, 0, None)
    resolve = cdi.resolver(cdi.load([str(run)]), str(tmp_path / "sys"), {0: "GPU-parent"},
                           caps, {(0, 1, 0): "MIG-a", (0, 2, 0): "MIG-b", (0, 2, 1): "MIG-c"})
    name = f"{VENDOR}/claim={uid}"
    assert resolve(f"{name}-gpu-0") == "GPU-parent"
    assert resolve(f"{name}-ok") == "MIG-a"
    for bad in ("not-there", "unknown-to-nvml", "not-in-file", "two-cis", "mismatched", "gi-only"):
        assert resolve(f"{name}-{bad}") is None, bad
    # without the driver's file no MIG device resolves, and none falls back to its parent
    no_file = cdi.resolver(cdi.load([str(run)]), str(tmp_path / "sys"), {0: "GPU-parent"},
                           cdi.read_mig_minors(str(tmp_path / "nowhere")), {(0, 1, 0): "MIG-a"})
    assert no_file(f"{name}-ok") is None
