"""Attribution as a step of the scrape: each GPU's energy since the previous scrape split
among the process series the processes collector emitted on it (docs/attribution.md).

The processes collector names each series it emits with a `ProcessKey` (the process and
its labels, typed) and hands the exporter one `Consumer` per series for each device whose
process list it read (`Sink.consumers`). Once every collector has returned, the exporter
calls `ProcessEnergy.update()` with the scrape's device readings and those lists, and
`emit()`s the counters it returns. The arithmetic itself is `gpu_exporter.model.attribution`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpu_exporter.model import catalogue as c
from gpu_exporter.model.attribution import Attribution, Consumer, Split, inputs
from gpu_exporter.model.labels import ProcessLabels
from gpu_exporter.model.metric_types import Emitted
from gpu_exporter.model.records import GpuReading


@dataclass(frozen=True)
class ProcessKey:
    """What names one process_gpu_energy_consumed_joules_total counter on a device: the
    process (a pid is reused: its start time tells two processes apart) and the labels
    of its series. A new start time or new labels (the kubelet answered and named the
    pod) is a new series, whose counter starts at 0.

    The labels are those of `ProcessLabels`, in the same names: None is absent, "" is
    present and empty (it hides the device's pod label of that name, see
    --processes.kubernetes-device-labels). Fields are in the order the labels are
    exposed (by name)."""

    start_time_ticks: int | None = None  # None: unknown, or the folded "other" series
    container_id: str | None = None
    k8s_container_name: str | None = None
    k8s_namespace_name: str | None = None
    k8s_pod_name: str | None = None
    k8s_pod_uid: str | None = None
    process_executable_name: str | None = None
    process_pid: str | None = None
    slurm_job_id: str | None = None

    @classmethod
    def of(cls, labels: ProcessLabels, start_time_ticks: int | None = None) -> ProcessKey:
        """The key of the series with these labels."""
        return cls(start_time_ticks, **labels)

    def labels(self) -> ProcessLabels:
        """The labels of the series, in the order of the fields."""
        out: ProcessLabels = {}
        if self.container_id is not None:
            out["container_id"] = self.container_id
        if self.k8s_container_name is not None:
            out["k8s_container_name"] = self.k8s_container_name
        if self.k8s_namespace_name is not None:
            out["k8s_namespace_name"] = self.k8s_namespace_name
        if self.k8s_pod_name is not None:
            out["k8s_pod_name"] = self.k8s_pod_name
        if self.k8s_pod_uid is not None:
            out["k8s_pod_uid"] = self.k8s_pod_uid
        if self.process_executable_name is not None:
            out["process_executable_name"] = self.process_executable_name
        if self.process_pid is not None:
            out["process_pid"] = self.process_pid
        if self.slurm_job_id is not None:
            out["slurm_job_id"] = self.slurm_job_id
        return out


# The series on each device whose process list was read this scrape, by device key (hw_id,
# a MIG device's, or a PCI address); None: the list could not be read this scrape.
Consumers = Mapping[str, Sequence[Consumer[ProcessKey]] | None]


class ProcessEnergy:
    """The counters of the split, kept from scrape to scrape: `update()` once a scrape."""

    def __init__(self) -> None:
        self._attribution: Attribution[ProcessKey] = Attribution()

    def update(self, readings: Sequence[GpuReading], consumers: Consumers) -> Split[ProcessKey]:
        """The counters after this scrape (cumulative): every series of a device whose
        processes were read, now or before, and its unattributed energy by reason. GPUs
        whose processes were never read take no part."""
        return self._attribution.update(inputs(readings, consumers, self._attribution))


def emit(split: Split[ProcessKey], out: Emitted) -> None:
    """The split's counters as process_gpu_energy_consumed_joules_total and
    hw_gpu_energy_unattributed_joules_total series."""
    for a in split.consumed:
        c.PROCESS_GPU_ENERGY.emit(out, a.joules, a.key.labels(), a.device)
    for u in split.unattributed:
        c.HW_GPU_ENERGY_UNATTRIBUTED.emit(out, u.joules, {"reason": u.reason}, u.device)
