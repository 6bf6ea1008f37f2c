"""Small helpers shared by the benchmark scripts (percentiles, means with 95 % intervals, JSON/table output)."""

from __future__ import annotations

import functools
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct``-th percentile by linear interpolation (numpy's default method)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * pct / 100.0
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


@functools.lru_cache(maxsize=64)
def t_quantile(p: float, df: int) -> float:
    """The ``p``-quantile (0.5 < p < 1) of Student's t distribution with ``df`` degrees of freedom: its density
    integrated by Simpson's rule from 0, the bound found by bisection (good to about 1e-6; no scipy needed)."""
    norm = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def density(x: float) -> float:
        return norm * (1.0 + x * x / df) ** (-(df + 1) / 2)

    def cdf(t: float, n: int = 2000) -> float:
        h = t / n
        inner = sum((4 if i % 2 else 2) * density(i * h) for i in range(1, n))
        return 0.5 + h / 3 * (density(0.0) + inner + density(t))

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, 2 * hi
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def mean_ci95(values: Sequence[float]) -> tuple[float, float | None]:
    """The mean of ``values`` and the half-width of its 95 % interval (Student's t on their sample standard
    deviation: ``t(0.975, n - 1) * sd / sqrt(n)``); None for the half-width of a single value."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, t_quantile(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def emit(result: dict, as_json: bool, table: str) -> None:
    """Print the JSON document or the human table."""
    if as_json:
        json.dump(result, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print(table)
