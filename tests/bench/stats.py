"""Small statistics for the benchmark tables (no numpy on the exporter's hosts)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(data: Sequence[float], q: float) -> float:
    """Nearest-rank percentile, q in 0..100."""
    ordered = sorted(data)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """Least squares y = a + b x; returns (a, b, R²)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    b = sxy / sxx
    a = my - b * mx
    ss_res = sum((y - (a + b * x)) ** 2 for x, y in zip(xs, ys, strict=True))
    ss_tot = sum((y - my) ** 2 for y in ys)
    return a, b, 1 - ss_res / ss_tot if ss_tot else 1.0
