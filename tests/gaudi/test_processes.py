"""Gaudi per process: the process holding a card's accel node (/dev/accel/accel<N>) is
its one user, charged the card's energy as NVML's process list charges an NVIDIA GPU; a
card nobody holds is unattributed `no_process`. Both kinds add up to the card's energy
(docs/attribution.md), on a fake /proc and the fake HLML through the real exporter."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_exporter.readers.procfs import accel
from tests.fake_hlml import scenario as fake
from tests.gaudi.conftest import ADDRESSES, only, two_gaudis
from tests.helpers import eventually, exporter, find, parse
from tests.processes.procfs import write_process
from tests.sysfs.tree import FakeSysfs


def _hold(procfs: Path, pid: int, node: str) -> None:
    write_process(procfs, pid, comm="python3", start=100 + pid)
    (procfs / str(pid) / "fd").mkdir(exist_ok=True)
    (procfs / str(pid) / "fd" / "7").symlink_to(node)


def test_the_holders_walk_reads_accel_nodes_only(sysfs: FakeSysfs, procfs: Path) -> None:
    two_gaudis(sysfs)
    _hold(procfs, 4001, "/dev/accel/accel1")
    _hold(procfs, 4002, "/dev/accel/accel_controlD1")  # hl-smi's control node: not a user
    _hold(procfs, 4003, "/dev/dri/renderD128")
    assert accel.read_accel_holders(str(procfs)) == {1: (4001,)}
    assert accel.accel_devices(str(sysfs.root), ("habanalabs",)) == dict(enumerate(ADDRESSES))
    assert accel.accel_devices(str(sysfs.root), ("amdgpu",)) == {}
    with pytest.raises(TimeoutError):
        accel.read_accel_holders(str(procfs), deadline=0.0)


def test_the_holder_is_charged_the_card_and_a_free_card_is_no_process(
        hlml_lib: Path, sysfs: FakeSysfs, procfs: Path, tmp_path: Path) -> None:
    sc = two_gaudis(sysfs)
    _hold(procfs, 4001, "/dev/accel/accel0")
    path = sc.write(tmp_path / "hlml")
    args = [*only("gaudi", "processes"), f"--gaudi.hlml-library={hlml_lib}",
            f"--path.sysfs={sysfs.root}", f"--path.procfs={procfs}",
            "--processes.kubelet-socket=/nonexistent.sock"]
    with exporter(args, env={fake.ENV_VAR: str(path)}) as exp:
        exp.scrape()  # the first reading of each card's energy
        for d in sc.devices:
            d.values["energy_mj"] += 1_500_000  # 1500 J each
        sc.write()

        def split() -> tuple[float, float]:
            s = parse(exp.scrape())
            charged = find(s, "process_gpu_energy_consumed_joules_total",
                           gpu_pci_address=ADDRESSES[0])
            free = find(s, "hw_gpu_energy_unattributed_joules_total",
                        gpu_pci_address=ADDRESSES[1], reason="no_process")
            assert len(charged) == 1 and len(free) == 1, (charged, free)
            assert charged[0].labels["process_pid"] == "4001"
            assert charged[0].labels["hw_id"] == sc.devices[0].uuid
            return charged[0].value, free[0].value

        assert eventually(split, 30) == (pytest.approx(1500.0), pytest.approx(1500.0))
