"""The labels a family carries besides its own: its scope's (device, process) and the
resource labels. Label sets are TypedDicts, so that mypy checks every label a collector
emits and `docs/metrics.md` is generated from the same declarations.

No `from __future__ import annotations` in this module or in `catalogue.py`: Python 3.11
sees Required/NotRequired only in evaluated annotations.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import (
    Any,
    Literal,
    Required,
    TypedDict,
    TypeVar,
    cast,
    get_args,
    get_origin,
    get_type_hints,
)

T = TypeVar("T", bound=Mapping[str, object])  # a TypedDict of labels


class PodLabels(TypedDict):
    """The pod(s) a GPU is allocated to: the labels of k8s_gpu_allocation_info, and of its
    device series with --processes.kubernetes-device-labels (`Sink.label_device`)."""

    k8s_namespace_name: str
    k8s_pod_name: str
    k8s_container_name: str


class DeviceLabels(TypedDict, total=False):
    """Joined by the exporter into every series of a device, from its identity; a
    collector names the device (`device=identity.key`), never these labels."""

    hw_id: str  # absent for a GPU that no source identifies (keyed by PCI address)
    hw_name: str  # absent when no source names the model
    hw_vendor: Required[str]
    gpu_index: Required[str]
    gpu_pci_address: str  # absent when unknown
    hw_parent: str  # MIG instances: the parent GPU's hw_id
    gpu_mig_profile: str  # MIG instances


class ProcessLabels(TypedDict, total=False):
    """Emitted by the collector with each per-process sample, each when known. The one
    series per GPU that folds the processes beyond the cap has only
    `process_executable_name="other"`."""

    process_pid: str
    process_executable_name: str
    container_id: str
    k8s_pod_name: str
    k8s_namespace_name: str
    # beyond the spec's list, same vocabulary: the pod uid from the cgroup path (known
    # without a kubelet) and the container name from the kubelet's PodResources
    k8s_pod_uid: str
    k8s_container_name: str
    slurm_job_id: str  # from the process's cgroup path (slurmd's cgroup plugins)


def known(labels: type[T], **values: str | None) -> T:
    """`labels` with the values that are known: a label whose value a source does not
    report (None or empty) is absent, never empty. The names are checked with the series
    (`metric_types.CHECK_LABELS`)."""
    return cast(T, {name: v for name, v in values.items() if v})


class NoLabels(TypedDict):
    """A family with no labels of its own."""


@dataclass(frozen=True)
class LabelSet:
    """Label names in declaration order, which of them every series must carry, and the
    values of those typed as a Literal."""

    names: tuple[str, ...] = ()
    required: frozenset[str] = frozenset()
    values: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def of(cls, typed: Any) -> "LabelSet":
        """The label set a TypedDict declares."""
        hints = get_type_hints(typed)
        values = tuple((name, get_args(tp)) for name, tp in hints.items()
                       if get_origin(tp) is Literal)
        required = frozenset(typed.__required_keys__)
        names = tuple(typed.__annotations__)  # the required first, for the reference
        names = (tuple(n for n in names if n in required)
                 + tuple(n for n in names if n not in required))
        return cls(names, required, values)

    @property
    def optional(self) -> frozenset[str]:
        return frozenset(self.names) - self.required

    def __or__(self, other: "LabelSet") -> "LabelSet":
        known = dict(self.values)
        return LabelSet(self.names + tuple(n for n in other.names if n not in self.names),
                        self.required | other.required,
                        self.values + tuple(v for v in other.values if v[0] not in known))

    def without(self, names: Iterable[str]) -> "LabelSet":
        drop = set(names)
        return LabelSet(tuple(n for n in self.names if n not in drop), self.required - drop,
                        tuple(v for v in self.values if v[0] not in drop))

    def all_optional(self) -> "LabelSet":
        return LabelSet(self.names, frozenset(), self.values)

    def problems(self, labels: Mapping[str, str]) -> list[str]:
        """What is wrong with one series' labels: undeclared or missing required ones."""
        keys = labels.keys()
        out = [f"undeclared label {k!r}" for k in keys if k not in self.names]
        out += [f"missing required label {k!r}" for k in sorted(self.required - keys)]
        return out


DEVICE_LABEL_SET = LabelSet.of(DeviceLabels) | LabelSet.of(PodLabels).all_optional()
PROCESS_LABEL_SET = LabelSet.of(ProcessLabels)


class Scope(Enum):
    """Which labels a family carries besides its own: `joined` by the exporter from the
    device the sample names, `emitted` by the collector with the family's own labels."""

    DEVICE = ("device", DEVICE_LABEL_SET, LabelSet())
    PROCESS = ("process", DEVICE_LABEL_SET, PROCESS_LABEL_SET)
    # eBPF families: device labels only when the device of the call is known.
    CUDA = ("cuda", DEVICE_LABEL_SET.all_optional(), LabelSet())
    HOST = ("host", LabelSet(), LabelSet())
    SELF = ("self", LabelSet(), LabelSet())

    def __init__(self, key: str, joined: LabelSet, emitted: LabelSet) -> None:
        self.key = key
        self.joined = joined
        self.emitted = emitted
