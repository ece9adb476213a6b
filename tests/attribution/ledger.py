"""What Prometheus' increase() makes of a run of scrapes, series by series, with perfect
data: the yardstick of the conservation tests (pure and end to end).

Per series, between two consecutive appearances: the difference, or after a decrease (a
counter reset) the new value. A series' first value counts nothing, as in Prometheus, so
a counter that does not start at 0 loses its first value: `first_values` lists them for the
tests to check that none does.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field


@dataclass
class Ledger:
    last: dict[Hashable, float] = field(default_factory=dict)
    increase: dict[Hashable, float] = field(default_factory=dict)
    first_values: dict[Hashable, float] = field(default_factory=dict)
    decreases: int = 0

    def scrape(self, values: Mapping[Hashable, float]) -> None:
        for key, v in values.items():
            before = self.last.get(key)
            if before is None:
                self.first_values.setdefault(key, v)
                self.increase.setdefault(key, 0.0)
            elif v >= before:
                self.increase[key] += v - before
            else:
                self.decreases += 1
                self.increase[key] += v
            self.last[key] = v

    def total(self, group: Hashable | None = None, *, of: int = 0) -> float:
        """Sum of the increases of every series, or of those whose key's element `of`
        equals `group`."""
        return sum(v for k, v in self.increase.items()
                   if group is None or (isinstance(k, tuple) and k[of] == group))
