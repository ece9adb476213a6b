"""From one scrape's device readings and process lists to what the attribution splits:
which GPUs take part, MIG devices under their GPU, compute slices from the profile."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_exporter.model.attribution import (
    Attribution,
    Consumer,
    Gpu,
    MigDevice,
    compute_slices,
    inputs,
)
from gpu_exporter.model.records import GpmReading, GpuIdentity, GpuReading


def reading(key: str, energy: float | None = 10.0, *, pci: str | None = None,
            parent: str | None = None, profile: str | None = None,
            up: bool = True, **gpm: Any) -> GpuReading:
    ident = GpuIdentity(key, "", "nvidia", pci, (0,), parent_hw_id=parent, mig_profile=profile)
    return GpuReading(ident, up, energy_consumed_joules=energy if up else None, **gpm)


A = Consumer("a", 1.0, 5)


@pytest.mark.parametrize(("profile", "slices"), [
    ("1g.10gb", 1), ("3g.40gb", 3), ("7g.80gb", 7), ("1c.3g.40gb", 1), ("2c.4g.40gb", 2),
    ("1g.10gb+me", 1), ("", 1), (None, 1), ("weird", 1),
])
def test_compute_slices_of_a_profile(profile: str | None, slices: int) -> None:
    assert compute_slices(profile) == slices


def test_gpus_whose_processes_were_read_take_part_by_hw_id_or_pci_address() -> None:
    got = inputs([reading("GPU-1"), reading("amd-uid", pci="0000:0b:00.0"), reading("GPU-2")],
                 {"GPU-1": [A], "0000:0b:00.0": []}, Attribution())
    assert got == [Gpu("GPU-1", 10.0, [A]), Gpu("amd-uid", 10.0, [])]


def test_a_gpu_attributed_before_whose_processes_are_not_reported_is_unknown() -> None:
    a = Attribution()
    a.update(inputs([reading("GPU-1")], {"GPU-1": [A]}, a))
    assert inputs([reading("GPU-1", 20.0)], {}, a) == [Gpu("GPU-1", 20.0, None)]


def test_a_lost_gpu_has_no_energy_reading() -> None:
    assert inputs([reading("GPU-1", up=False)], {"GPU-1": [A]}, Attribution()) == [
        Gpu("GPU-1", None, [A])]


def test_mig_devices_go_under_their_gpu_with_slices_and_gpm_activity() -> None:
    # MIG-1 alone in its GPU instance (its own GPM); MIG-2 and MIG-3 share one (its GPM is
    # the instance's); MIG-4 has none.
    own, shared = GpmReading(1.0, engine_active_ratio=0.5), GpmReading(1.0, 0.25)
    readings = [reading("GPU-P", gpm_instances={2: shared}),
                reading("MIG-1", None, parent="GPU-P", profile="3g.40gb", gpm=own),
                reading("MIG-2", None, parent="GPU-P", profile="1c.2g.20gb",
                        gpu_instance_gpm=shared),
                reading("MIG-3", None, parent="GPU-P", profile="1c.2g.20gb",
                        gpu_instance_gpm=shared),
                reading("MIG-4", None, parent="GPU-P", profile="1g.10gb")]
    got = inputs(readings, {"MIG-1": [A], "MIG-2": None}, Attribution())
    assert got == [Gpu("GPU-P", 10.0, None, [MigDevice("MIG-1", 3, [A], 0.5),
                                             MigDevice("MIG-2", 1, None, 0.25),
                                             MigDevice("MIG-3", 1, None, 0.25),
                                             MigDevice("MIG-4", 1, None, None)])]
