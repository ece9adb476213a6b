"""At most N processes per GPU get series of their own; the rest are folded into one.

A process keeps its own series for as long as it lives once it has one: the first
processes seen on a device take the places, a place frees when its process exits. A
process that finds no free place is folded (into `process_executable_name="other"`, one
series per device) for as long as it lives, even if a place frees later: its energy
counter must not move from one series to another. Each process folded is counted once.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable


class ProcessCap:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the cap must allow at least one process per GPU")
        self.limit = limit
        self.folded_total = 0  # processes folded since start
        self._own: dict[str, set[Hashable]] = {}
        self._folded: dict[str, set[Hashable]] = {}

    def assign(self, device: str, processes: Iterable[Hashable]) -> set[Hashable]:
        """The processes now on `device` (identities: pid and start time) that keep their
        own series; the others are folded. Processes no longer listed are forgotten."""
        now = set(processes)
        own = self._own.get(device, set()) & now
        folded = self._folded.get(device, set()) & now
        for p in sorted(now - own - folded, key=repr):  # deterministic across scrapes
            if len(own) < self.limit:
                own.add(p)
            else:
                folded.add(p)
                self.folded_total += 1
        self._own[device], self._folded[device] = own, folded
        return own

    def forget_other_devices(self, devices: Iterable[str]) -> None:
        """Drops the state of devices not in `devices` (gone from the host)."""
        keep = set(devices)
        self._own = {d: v for d, v in self._own.items() if d in keep}
        self._folded = {d: v for d, v in self._folded.items() if d in keep}
