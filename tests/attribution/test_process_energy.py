"""The attribution step on its own (gpu_exporter/model/process_energy.py): a scrape's device
readings and typed process series in, the energy counters of each series out. The cases
the exporter's tests reach only end to end: a process on several GPUs, MIG devices, a
process leaving between scrapes, a reused pid, labels learnt later, a list that could not
be read, and the labels exactly as the series carry them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import get_type_hints

import pytest

from gpu_exporter.model import catalogue as c
from gpu_exporter.model.attribution import Consumer, Split
from gpu_exporter.model.labels import ProcessLabels
from gpu_exporter.model.metric_types import Emitted
from gpu_exporter.model.process_energy import ProcessEnergy, ProcessKey, emit
from gpu_exporter.model.records import GpuIdentity, GpuReading

EVERY_LABEL: ProcessLabels = {
    "process_pid": "4242", "process_executable_name": "python3", "container_id": "c0ffee",
    "k8s_pod_name": "train-0", "k8s_namespace_name": "ml", "k8s_pod_uid": "5b0e-uid",
    "k8s_container_name": "trainer", "slurm_job_id": "77",
}


def gpu(key: str, energy: float | None, *, parent: str | None = None,
        profile: str | None = None) -> GpuReading:
    ident = GpuIdentity(key, "", "nvidia", None, (0,), parent_hw_id=parent,
                        mig_profile=profile)
    return GpuReading(ident, energy is not None or parent is not None,
                      energy_consumed_joules=energy)


def proc(pid: int, start: int | None = 100, activity: float | None = None,
         **labels: str) -> Consumer[ProcessKey]:
    key = ProcessKey.of({"process_pid": str(pid), "process_executable_name": f"job{pid}",
                         **labels}, start)
    return Consumer(key, activity)


def counters(split: Split[ProcessKey]) -> dict[tuple[str, str | None, int | None], float]:
    """joules by (device, pid label, start time) of every series the step returns."""
    return {(a.device, a.key.process_pid, a.key.start_time_ticks): a.joules
            for a in split.consumed}


def unattributed(split: Split[ProcessKey], device: str) -> dict[str, float]:
    return {u.reason: u.joules for u in split.unattributed if u.device == device}


def scrapes(steps: Sequence[tuple[Sequence[GpuReading],
                                  Mapping[str, Sequence[Consumer[ProcessKey]] | None]]]
            ) -> list[Split[ProcessKey]]:
    step = ProcessEnergy()
    return [step.update(readings, consumers) for readings, consumers in steps]


def test_a_key_gives_back_every_process_label_in_name_order_empty_ones_kept() -> None:
    # Every label ProcessLabels declares travels through the key (a field forgotten in
    # labels() would drop it from the energy series), in the order the exposition has
    # always had them (by name); "" is a label that hides the device's pod label.
    assert set(EVERY_LABEL) == set(get_type_hints(ProcessLabels))
    key = ProcessKey.of(EVERY_LABEL, 123)
    assert key.labels() == EVERY_LABEL
    assert list(key.labels()) == sorted(EVERY_LABEL)
    assert key.start_time_ticks == 123
    hidden = ProcessKey.of({"process_pid": "1", "k8s_pod_name": "", "k8s_namespace_name": ""})
    assert hidden.labels() == {"k8s_namespace_name": "", "k8s_pod_name": "", "process_pid": "1"}
    assert ProcessKey.of({"process_executable_name": "other"}).labels() == {
        "process_executable_name": "other"}


def test_keys_are_equal_only_for_the_same_process_and_labels() -> None:
    a = ProcessKey.of({"process_pid": "7"}, 100)
    assert a == ProcessKey.of({"process_pid": "7"}, 100)
    assert hash(a) == hash(ProcessKey.of({"process_pid": "7"}, 100))
    assert a != ProcessKey.of({"process_pid": "7"}, 101)  # the pid reused
    assert a != ProcessKey.of({"process_pid": "7", "k8s_pod_name": ""}, 100)
    assert a != ProcessKey.of({"process_pid": "7", "k8s_pod_name": "p"}, 100)


def test_a_process_on_two_gpus_has_a_counter_on_each_paid_by_that_gpu_alone() -> None:
    both = proc(1, activity=50.0)
    splits = scrapes([
        ([gpu("GPU-A", 1000.0), gpu("GPU-B", 5000.0)],
         {"GPU-A": [both, proc(2)], "GPU-B": [both]}),
        ([gpu("GPU-A", 1400.0), gpu("GPU-B", 5090.0)],
         {"GPU-A": [both, proc(2, activity=150.0)], "GPU-B": [both]}),
    ])
    assert counters(splits[0]) == {("GPU-A", "1", 100): 0.0, ("GPU-A", "2", 100): 0.0,
                                   ("GPU-B", "1", 100): 0.0}
    assert counters(splits[1]) == pytest.approx({
        ("GPU-A", "1", 100): 100.0, ("GPU-A", "2", 100): 300.0, ("GPU-B", "1", 100): 90.0})


def test_a_process_that_left_has_no_series_and_its_interval_is_paid_by_those_left() -> None:
    splits = scrapes([
        ([gpu("G", 0.0)], {"G": [proc(1), proc(2)]}),
        ([gpu("G", 100.0)], {"G": [proc(1, activity=10.0), proc(2, activity=30.0)]}),
        ([gpu("G", 300.0)], {"G": [proc(2, activity=5.0)]}),
        ([gpu("G", 350.0)], {"G": []}),
    ])
    assert counters(splits[1]) == pytest.approx({("G", "1", 100): 25.0, ("G", "2", 100): 75.0})
    assert counters(splits[2]) == pytest.approx({("G", "2", 100): 275.0})
    assert counters(splits[3]) == {}
    assert unattributed(splits[3], "G") == {"no_process": 50.0, "no_activity_data": 0.0}


def test_a_reused_pid_or_labels_learnt_later_start_a_new_counter_at_zero() -> None:
    splits = scrapes([
        ([gpu("G", 0.0)], {"G": [proc(1, start=100)]}),
        ([gpu("G", 60.0)], {"G": [proc(1, start=100)]}),
        # pid 1 exited and was reused by another process (another start time)
        ([gpu("G", 100.0)], {"G": [proc(1, start=900)]}),
        ([gpu("G", 130.0)], {"G": [proc(1, start=900)]}),
        # the kubelet answered: the same process, now with its pod
        ([gpu("G", 200.0)], {"G": [proc(1, start=900, k8s_pod_name="p")]}),
    ])
    assert counters(splits[1]) == {("G", "1", 100): 60.0}
    assert counters(splits[2]) == {("G", "1", 900): 0.0}
    assert unattributed(splits[2], "G") == {"no_process": 40.0, "no_activity_data": 0.0}
    assert counters(splits[3]) == {("G", "1", 900): 30.0}
    (named,) = splits[4].consumed
    assert (named.key.k8s_pod_name, named.joules) == ("p", 0.0)


def test_processes_in_mig_devices_are_counted_on_their_mig_device() -> None:
    def readings(energy: float) -> list[GpuReading]:
        return [gpu("GPU-P", energy), gpu("MIG-3g", None, parent="GPU-P", profile="3g.40gb"),
                gpu("MIG-1g", None, parent="GPU-P", profile="1g.10gb")]

    splits = scrapes([
        (readings(0.0), {"MIG-3g": [proc(1)], "MIG-1g": [proc(2)]}),
        # no GPM: the GPU's 400 J by compute slices, 3 to 1
        (readings(400.0), {"MIG-3g": [proc(1, activity=1.0)], "MIG-1g": [proc(2)]}),
    ])
    assert counters(splits[1]) == pytest.approx({("MIG-3g", "1", 100): 300.0,
                                                 ("MIG-1g", "2", 100): 100.0})
    assert splits[1].mig_split == {"GPU-P": "compute_slices"}
    assert unattributed(splits[1], "GPU-P") == {"no_process": 0.0, "no_activity_data": 0.0}


def test_an_unread_list_keeps_the_series_and_counts_no_activity_data() -> None:
    splits = scrapes([
        ([gpu("G", 0.0), gpu("never", 0.0)], {"G": [proc(1)]}),
        ([gpu("G", 80.0), gpu("never", 50.0)], {"G": None}),
        ([gpu("G", 100.0), gpu("never", 90.0)], {}),  # the collector timed out
        ([gpu("G", 130.0), gpu("never", 95.0)], {"G": [proc(1)]}),
    ])
    assert counters(splits[1]) == counters(splits[2]) == {("G", "1", 100): 0.0}
    assert unattributed(splits[2], "G") == {"no_process": 0.0, "no_activity_data": 100.0}
    assert counters(splits[3]) == {("G", "1", 100): 30.0}
    # a GPU whose processes were never read takes no part
    assert all(u.device == "G" for s in splits for u in s.unattributed)


def test_emit_writes_each_counter_with_its_labels_on_its_device() -> None:
    folded = Consumer(ProcessKey.of({"process_executable_name": "other"}), 1.0)
    hidden = Consumer(ProcessKey.of({"process_pid": "3", "k8s_pod_name": ""}, 5), 1.0)
    step = ProcessEnergy()
    step.update([gpu("G", 0.0)], {"G": [folded, hidden]})
    out = Emitted()
    emit(step.update([gpu("G", 10.0)], {"G": [folded, hidden]}), out)
    assert sorted(out.scalars[c.PROCESS_GPU_ENERGY], key=repr) == [
        ({"k8s_pod_name": "", "process_pid": "3"}, 5.0, "G"),
        ({"process_executable_name": "other"}, 5.0, "G"),
    ]
    assert out.scalars[c.HW_GPU_ENERGY_UNATTRIBUTED] == [
        ({"reason": "no_process"}, 0.0, "G"), ({"reason": "no_activity_data"}, 0.0, "G")]
