"""A metric family and the one way to emit a sample of it.

A family declares its full label schema: its own labels as a TypedDict (keys marked
NotRequired may be absent), plus its scope's (`labels.Scope`) and the resource labels.
A collector emits through the family, which mypy checks against that TypedDict:

    c.HW_GPU_TEMPERATURE.emit(sink, celsius, {"sensor": "die"}, device=identity.key)

The exporter joins the scope's device labels and the resource labels; with
`GPU_EXPORTER_CHECK_LABELS=1` (the test suite sets it) every series of every scrape is
checked against the schema, and a label not declared, or a required one missing, fails
the scrape.
"""

from __future__ import annotations

import itertools
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Generic, TypeVar

from gpu_exporter.model.labels import LabelSet, Scope

# Checked in tests (and by anyone who sets it): the check costs a set operation per
# series, which a production scrape does not pay.
CHECK_LABELS_VAR = "GPU_EXPORTER_CHECK_LABELS"
CHECK_LABELS = os.environ.get(CHECK_LABELS_VAR) == "1"

L = TypeVar("L", bound=Mapping[str, object])  # a TypedDict: the family's own labels

Buckets = Sequence[tuple[float, float]]  # (upper bound, cumulative count), +Inf last
# own labels, value, device key (hw_id or PCI address) whose device labels are joined in
Series = tuple[Mapping[str, str], float, str | None]
HistogramSeries = tuple[Mapping[str, str], Buckets, float, str | None]


class Kind(Enum):
    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


class LabelSchemaError(Exception):
    """A series whose labels are not what its family declares (a bug, found by tests)."""


@dataclass(kw_only=True)
class Emitted:
    """What collectors emit during one scrape, family by family."""

    scalars: defaultdict[Family[Any], list[Series]] = field(
        default_factory=lambda: defaultdict(list))
    histograms: defaultdict[Family[Any], list[HistogramSeries]] = field(
        default_factory=lambda: defaultdict(list))


_order = itertools.count()


class Family(Generic[L]):
    """One catalogue entry. Use `Gauge`, `Counter` or `Histogram`."""

    kind: ClassVar[Kind]

    def __init__(
        self, name: str, help: str, scope: Scope, labels: type[L], *, unit: str = "",
        fixed: bool = False, sources: str = "", dcgm: str = "",
    ) -> None:
        self.name = name  # the Prometheus name, `_total` included for counters
        self.help = help
        self.scope = scope
        self.unit = unit  # base unit suffix of the name, "" when none
        self.fixed = fixed  # name appears in public queries: never rename
        self.sources = sources  # where the value comes from, for the reference
        # the dcgm-exporter field it equals (and how), for users translating their queries
        self.dcgm = dcgm
        declared = LabelSet.of(labels)
        # Every label a series may carry but the resource labels, and the family's own
        # (those that are not its scope's).
        self.schema: LabelSet = scope.joined | declared
        self.own: LabelSet = declared.without(scope.emitted.names)
        missing = scope.emitted.required - set(declared.names)
        if missing:
            raise TypeError(f"{name}: a {scope.key} family's labels must include "
                            f"{sorted(missing)} (derive them from its scope's TypedDict)")
        self.order = next(_order)  # exposition order: the catalogue's

    @property
    def labels(self) -> tuple[str, ...]:
        """The family's own label names."""
        return self.own.names

    @property
    def family_name(self) -> str:
        """Name as prometheus_client wants it (counters without `_total`)."""
        if self.kind is Kind.COUNTER and self.name.endswith("_total"):
            return self.name[: -len("_total")]
        return self.name

    def check(self, labels: Mapping[str, str], resource: Mapping[str, str]) -> None:
        """Raises LabelSchemaError unless one series' full labels fit the schema."""
        problems = (self.schema | LabelSet(tuple(resource), frozenset(resource))).problems(
            labels)
        if problems:
            raise LabelSchemaError(f"{self.name}{dict(labels)}: {'; '.join(problems)}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class _Scalar(Family[L]):
    def emit(self, out: Emitted, value: float | None, labels: L,
             device: str | None = None) -> None:
        """One sample; `None` (not reported) emits nothing. `device`: the hw_id (or PCI
        address) of the device whose labels the exporter joins in."""
        if value is not None:
            out.scalars[self].append((labels, value, device))  # type: ignore[arg-type]


class Gauge(_Scalar[L]):
    kind = Kind.GAUGE


class Counter(_Scalar[L]):
    kind = Kind.COUNTER


class Histogram(Family[L]):
    kind = Kind.HISTOGRAM

    def emit(self, out: Emitted, buckets: Buckets, sum_value: float, labels: L,
             device: str | None = None) -> None:
        """One histogram series: cumulative `buckets`, +Inf last."""
        out.histograms[self].append((labels, buckets, sum_value, device))  # type: ignore[arg-type]
