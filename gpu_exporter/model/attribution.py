"""Who pays for each joule: a GPU's energy split among the processes on it.

At every scrape the increase E of each GPU's energy counter since the previous scrape is
split among the *consumers* on that GPU (a process, or the folded "other" of a GPU with
more processes than the cap) in proportion to their activity in that interval: the sum of
the `smUtil` of NVML's process-utilization samples, or the engine busy time from DRM
fdinfo. The whole E goes to the consumers, idle time included: whoever holds a GPU pays
for it. What cannot be attributed is counted by reason:

- `no_process`: no consumer was on the GPU throughout the interval;
- `no_activity_data`: consumers were, but the driver gave no per-process activity for any
  of them (or the process list could not be read this scrape). It is not guessed.

Conservation is exact by construction: every joule of every interval goes to exactly one
counter, so for each physical GPU the increases of the consumers' counters and of the
unattributed counters add up to the increase of its energy counter since the first
reading (to floating-point rounding). Three rules keep that true for Prometheus'
`increase()`, not only for the raw values:

- every counter starts at 0: a consumer (or GPU, or MIG device) seen for the first time is
  only a baseline in that scrape, and is paid from the next interval on (the energy of
  the interval in which it appeared goes to those present throughout it);
- a consumer that is gone at a scrape has no series any more, so the interval in which it
  left is paid by those still present (or is `no_process`);
- a process list that could not be read leaves the previous consumers' counters as they
  were (their series continue) and counts the interval as `no_activity_data`.

Shares among the consumers present throughout an interval, in order:
1. one consumer: all of it (no share to estimate);
2. activity known for at least one: by activity (a consumer without samples while others
   have some was idle: 0);
3. activity known and all zero (the GPU was idle, held): by device memory when every
   consumer's is known, else equally;
4. no activity known for any: `no_activity_data`.

MIG: the physical GPU's E is first split among its MIG devices by the engine activity of
their GPU instances (GPM) times their compute slices, or by compute slices alone where GPM
gives nothing (or everything is idle); then inside each MIG device as above. A counter
reset (driver reload) counts the new reading as the increase, as `increase()` does.

Pure arithmetic: no I/O, no Prometheus; the exporter feeds it each scrape's readings.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from gpu_exporter.model.records import GpuReading

Reason = Literal["no_process", "no_activity_data"]
REASONS: tuple[Reason, ...] = ("no_process", "no_activity_data")
MigSplit = Literal["gpm", "compute_slices"]
N = TypeVar("N", int, float)
# What names one consumer's series. The arithmetic only compares keys; the exporter's are
# `process_energy.ProcessKey` (the process and its labels), the arithmetic tests' strings.
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Consumer(Generic[K]):
    """One series of process_gpu_energy_consumed_joules_total on one device."""

    key: K  # what names the series
    # Busy measure over the interval since the previous scrape, in any unit shared by the
    # consumers of one device (NVML: sum of smUtil of the new samples; fdinfo: busy
    # seconds). None: the driver gave no activity for this consumer this interval.
    activity: float | None = None
    memory_bytes: int | None = None


@dataclass(frozen=True)
class MigDevice(Generic[K]):
    """A MIG device (compute instance) of a GPU in MIG mode."""

    device: str
    compute_slices: int
    consumers: Sequence[Consumer[K]] | None  # None: its process list was not read
    # Engine activity (0..1) of its GPU instance over the interval, from GPM; None without.
    activity_ratio: float | None = None


@dataclass(frozen=True)
class Gpu(Generic[K]):
    """One physical GPU at one scrape."""

    device: str
    energy_joules: float | None  # the energy counter as exported; None: not read now
    consumers: Sequence[Consumer[K]] | None = ()  # None: the process list was not read
    mig: Sequence[MigDevice[K]] | None = None  # None: not in MIG mode


@dataclass(frozen=True)
class Attributed(Generic[K]):
    device: str
    key: K
    joules: float  # since the consumer was first seen on this device


@dataclass(frozen=True)
class Unattributed:
    device: str
    reason: Reason
    joules: float  # since the exporter's first reading of this device


@dataclass(frozen=True)
class Split(Generic[K]):
    """The counters to expose after one scrape (cumulative values)."""

    consumed: tuple[Attributed[K], ...] = ()
    unattributed: tuple[Unattributed, ...] = ()
    mig_split: Mapping[str, MigSplit] = field(default_factory=dict)  # by physical GPU


@dataclass
class _Holder(Generic[K]):
    """One device whose energy share is split among consumers (a GPU, a MIG device)."""

    present: set[K]  # consumer keys exposed at the previous split
    totals: dict[K, float]
    unattributed: dict[Reason, float] = field(
        default_factory=lambda: dict.fromkeys(REASONS, 0.0))

    @classmethod
    def first(cls, consumers: Sequence[Consumer[K]] | None) -> _Holder[K]:
        totals = dict.fromkeys((c.key for c in consumers or ()), 0.0)  # in their order
        return cls(set(totals), totals)

    def split(self, joules: float, consumers: Sequence[Consumer[K]] | None) -> None:
        if consumers is None:
            # Unknown this scrape: the consumers' series continue unchanged.
            self.unattributed["no_activity_data"] += joules
            return
        now = _merge(consumers)
        throughout = [c for key, c in now.items() if key in self.present]
        weights = _weights(throughout)
        if isinstance(weights, str):
            self.unattributed[weights] += joules
        else:
            for c, part in zip(throughout, shares(joules, weights), strict=True):
                self.totals[c.key] += part
        self.totals = {key: self.totals.get(key, 0.0) for key in now}
        self.present = set(now)

    def out(self, device: str, consumed: list[Attributed[K]],
            unattributed: list[Unattributed]) -> None:
        consumed.extend(Attributed(device, key, joules) for key, joules in self.totals.items())
        unattributed.extend(Unattributed(device, r, self.unattributed[r]) for r in REASONS)


@dataclass
class _GpuState(Generic[K]):
    energy: float
    holder: _Holder[K]
    mig: dict[str, _Holder[K]]


class Attribution(Generic[K]):
    """Keeps the counters between scrapes; `update()` once per scrape."""

    def __init__(self) -> None:
        self._gpus: dict[str, _GpuState[K]] = {}

    def knows(self, device: str) -> bool:
        """Whether this physical GPU has been attributed (its counters exist)."""
        return device in self._gpus

    def update(self, gpus: Iterable[Gpu[K]]) -> Split[K]:
        consumed: list[Attributed[K]] = []
        unattributed: list[Unattributed] = []
        methods: dict[str, MigSplit] = {}
        for g in gpus:
            energy = _finite(g.energy_joules)
            state = self._gpus.get(g.device)
            if energy is None:
                continue  # not read now: nothing exposed, the state waits for the next
            if state is None:
                state = self._gpus[g.device] = _GpuState(
                    energy, _Holder.first(None if g.mig is not None else g.consumers),
                    {m.device: _Holder.first(m.consumers) for m in g.mig or ()})
            else:
                # A counter that went back was reset (driver reload): it counted from 0.
                joules = energy - state.energy if energy >= state.energy else energy
                state.energy = energy
                if g.mig is None:
                    state.mig.clear()
                    state.holder.split(joules, g.consumers)
                else:
                    methods[g.device] = self._split_mig(state, joules, g.mig)
            state.holder.out(g.device, consumed, unattributed)
            for device, holder in state.mig.items():
                holder.out(device, consumed, unattributed)
        return Split(tuple(consumed), tuple(unattributed), methods)

    @staticmethod
    def _split_mig(state: _GpuState[K], joules: float, migs: Sequence[MigDevice[K]]) -> MigSplit:
        # A MIG device seen for the first time starts at 0 like any counter; the GPU's own
        # holder has no consumers in MIG mode (processes run in MIG devices).
        throughout = [m for m in migs if m.device in state.mig]
        slices = [float(max(0, m.compute_slices)) for m in throughout]
        activity = [_finite(m.activity_ratio) for m in throughout]
        method: MigSplit = "compute_slices"
        weights = slices
        if throughout and all(a is not None for a in activity):
            by_activity = [max(0.0, a or 0.0) * s for a, s in zip(activity, slices, strict=True)]
            if sum(by_activity) > 0:
                weights, method = by_activity, "gpm"
        if not throughout or sum(weights) <= 0:
            state.holder.split(joules, ())  # nobody holds a slice of it: no_process
        else:
            for m, part in zip(throughout, shares(joules, weights), strict=True):
                state.mig[m.device].split(part, m.consumers)
        state.holder.present, state.holder.totals = set(), {}
        state.mig = {m.device: state.mig.get(m.device) or _Holder.first(m.consumers)
                     for m in migs}
        return method


def shares(total: float, weights: Sequence[float]) -> list[float]:
    """`total` split in proportion to `weights` (non-negative, sum > 0). The rounding
    residue goes to the largest part, so the parts add up to `total` as closely as floats
    allow and none is negative. The largest part is the one of the largest weight: with a
    total near the smallest float every product may underflow to 0, and the residue must
    not then land on a weight of 0."""
    whole = math.fsum(weights)
    parts = [total * (w / whole) for w in weights]
    largest = max(range(len(weights)), key=weights.__getitem__)
    parts[largest] += total - math.fsum(parts)
    return parts


def _weights(throughout: Sequence[Consumer[K]]) -> list[float] | Reason:
    if not throughout:
        return "no_process"
    if len(throughout) == 1:
        return [1.0]
    activity = [_finite(c.activity) for c in throughout]
    if all(a is None for a in activity):
        return "no_activity_data"
    busy = [max(0.0, a) if a is not None else 0.0 for a in activity]
    if math.fsum(busy) > 0:
        return busy
    memory = [c.memory_bytes for c in throughout]
    if all(m is not None and m >= 0 for m in memory) and sum(m or 0 for m in memory) > 0:
        return [float(m or 0) for m in memory]
    return [1.0] * len(throughout)


def _merge(consumers: Sequence[Consumer[K]]) -> dict[K, Consumer[K]]:
    """Consumers by key; two with one key (never from the collector) are added up."""
    out: dict[K, Consumer[K]] = {}
    for c in consumers:
        before = out.get(c.key)
        if before is None:
            out[c.key] = c
            continue
        out[c.key] = Consumer(c.key, _add(before.activity, c.activity),
                              _add(before.memory_bytes, c.memory_bytes))
    return out


def _add(a: N | None, b: N | None) -> N | None:
    if a is None:
        return b
    return a if b is None else a + b


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


# MIG profiles: `1g.10gb` (a GPU instance with one compute instance: 1 compute slice),
# `1c.3g.40gb` (a compute instance of 1 slice in a 3-slice GPU instance), `+me` suffixes.
_PROFILE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.")


def compute_slices(profile: str | None) -> int:
    """Compute slices of a MIG device from its profile; 1 when the profile does not say."""
    m = _PROFILE.match(profile or "")
    if m is None:
        return 1
    return int(m.group(1) or m.group(2))


def inputs(
    readings: Sequence[GpuReading],
    consumers: Mapping[str, Sequence[Consumer[K]] | None],
    attribution: Attribution[K],
) -> list[Gpu[K]]:
    """One scrape's devices as the attribution takes them.

    `consumers` is what the processes collector read, by device key (a MIG device's for
    processes in it; AMD and Intel devices may be named by PCI address), None for a device
    whose list it could not read. A GPU is attributed when its processes (or its MIG
    devices') were read this scrape, or when it was attributed before (then its processes
    are unknown this scrape, not absent). A MIG device's activity is the GPM engine activity
    of its GPU instance (its own, or the one it shares with other compute instances)."""
    children: dict[str, list[GpuReading]] = {}
    for r in readings:
        if r.identity.parent_hw_id is not None:
            children.setdefault(r.identity.parent_hw_id, []).append(r)
    out: list[Gpu[K]] = []
    for r in readings:
        ident = r.identity
        if ident.parent_hw_id is not None:
            continue
        names = [n for n in (ident.key, ident.pci_address) if n]
        migs = children.get(ident.hw_id or "", [])
        reported = any(n in consumers for n in names) or any(
            m.identity.key in consumers for m in migs)
        if not reported and not attribution.knows(ident.key):
            continue
        energy = r.energy_consumed_joules if r.up else None
        if migs:
            out.append(Gpu(ident.key, energy, None, [
                MigDevice(m.identity.key, compute_slices(m.identity.mig_profile),
                          consumers.get(m.identity.key), _engine_activity(m))
                for m in migs]))
        else:
            found = next((consumers[n] for n in names if n in consumers), None)
            out.append(Gpu(ident.key, energy, found))
    return out


def _engine_activity(mig: GpuReading) -> float | None:
    gpm = mig.gpm or mig.gpu_instance_gpm
    return None if gpm is None else gpm.engine_active_ratio
