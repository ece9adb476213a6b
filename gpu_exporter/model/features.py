"""Whether a collector, or one optional part of it, runs: its state, why not, and the fix.

A bottom-layer module (it imports nothing of the package): the sources under `sources/`
report their features' states with these types, the collectors above them hand them to
the exporter, and `doctor` and `gpu_exporter_feature_status` show them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

FeatureState = Literal["enabled", "unavailable", "disabled"]


@dataclass(frozen=True)
class Availability:
    """The state of a collector or of one of its features.

    `unavailable`: the host lacks something (library, device, privilege, driver function)
    that the operator can provide; `fix` says how. `disabled`: turned off by a flag, or a
    capability the device does not have or has switched off (ECC off, a consumer card):
    nothing to fix, though `fix` may say how to turn it on.
    """

    state: FeatureState
    reason: str = ""
    fix: str = ""  # what the operator can do about it: shown by `doctor` and logged

    @classmethod
    def enabled(cls, reason: str = "") -> Availability:
        return cls("enabled", reason)

    @classmethod
    def unavailable(cls, reason: str, fix: str = "") -> Availability:
        return cls("unavailable", reason, fix)

    @classmethod
    def disabled(cls, reason: str = "", fix: str = "") -> Availability:
        return cls("disabled", reason, fix)


@dataclass(frozen=True)
class Feature:
    """One optional part of a running collector (`gpu_exporter_feature_status{feature=
    "<collector>.<name>"}`). A feature whose state can differ from device to device (a
    host mixing GPUs with and without it) is reported once per device, with its hw_id."""

    name: str  # without the collector's prefix: "xid" is reported as "nvidia.xid"
    availability: Availability
    hw_id: str | None = None


def device_features(name: str, states: Mapping[str, Availability]) -> list[Feature]:
    """A feature of several devices (states by hw_id): one entry while every device is
    in the same state, else one per device, with its hw_id."""
    if len(set(states.values())) <= 1:
        return [Feature(name, a) for a in list(states.values())[:1]]
    return [Feature(name, a, hw_id) for hw_id, a in sorted(states.items())]
