"""GPUs handed out through Kubernetes DRA: the kubelet reports a claim's CDI devices
(dynamic_resources, kubelet 1.34+), the exporter resolves them with the node's CDI spec
files and the NVIDIA driver's minor numbers, and k8s_gpu_allocation_info names the claim.

The spec follows NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu,
cmd/gpu-kubelet-plugin/cdi.go): a transient spec per claim in /var/run/cdi named
`k8s.gpu.nvidia.com-claim_<claim uid>.json`, kind `k8s.gpu.nvidia.com/claim`, devices
`<claim uid>-<device>` carrying the GPU's `/dev/nvidia<minor>` only, the control nodes in
the spec's common edits. The driver's /proc tree is the H100 host's
(tests/fixtures/procfs/nvidia-h100x8: minors 0.. by bus, UUIDs as the fake NVML's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_exporter.collectors import REGISTRY
from gpu_exporter.sources.kubelet import cdi
from tests.fake_nvml import scenario as fake
from tests.helpers import Series, exporter, find, parse, promtool_check_metrics
from tests.nvidia import driverfs
from tests.processes.kubelet import Claim, Container, Pod, kubelet

CLAIM_UID = "7a1f2b3c-0000-4000-8000-00000000c1a1"
VENDOR = "k8s.gpu.nvidia.com"


def uuid(i: int) -> str:
    return fake.h100(i).uuid


def nvidia_claim_spec(folder: Path, claim_uid: str, minors: dict[str, int]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "cdiVersion": "0.5.0",
        "kind": f"{VENDOR}/claim",
        "devices": [{"name": f"{claim_uid}-{name}",
                     "containerEdits": {"deviceNodes": [{"path": f"/dev/nvidia{minor}"}]}}
                    for name, minor in minors.items()],
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}]},
    }
    (folder / f"{VENDOR}-claim_{claim_uid}.json").write_text(json.dumps(spec))


def _scrape(lib: Path, tmp: Path, pods: list[Pod]) -> list[Series]:
    sc = fake.Scenario(devices=[fake.h100(i) for i in range(3)])
    path = sc.write(tmp / "gpus.scenario")
    sock = tmp / "kubelet.sock"
    proc = driverfs.procfs(tmp)
    keep = {"nvidia", "processes"}
    flags = [*(f"--no-collector.{c.name}" for c in REGISTRY if c.name not in keep),
             "--collector.nvidia", "--collector.processes",
             f"--processes.kubelet-socket={sock}", f"--path.procfs={proc}",
             f"--path.sysfs={tmp / 'sys'}",
             f"--processes.cdi-spec-dirs={tmp / 'etc-cdi'},{tmp / 'run-cdi'}"]
    (tmp / "sys").mkdir(exist_ok=True)
    with kubelet(sock, pods), exporter(flags, env=fake.env(lib, path)) as exp:
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
    nvidia_claim_spec(tmp_path / "run-cdi", CLAIM_UID, {"gpu-1": 1})
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


def test_a_kubelet_without_dra_fields_gives_no_dra_state(lib: Path, tmp_path: Path) -> None:
    pods = [Pod("ml", "train-0", [Container("trainer", {"nvidia.com/gpu": [uuid(0)]})])]
    s = _scrape(lib, tmp_path, pods)
    assert _allocations(s) == {(uuid(0), "train-0", "")}
    assert _dra_state(s) == []


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
