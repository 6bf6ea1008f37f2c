"""Small helpers shared by the benchmark scripts (percentiles, JSON/table output)."""

from __future__ import annotations

import json
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


def emit(result: dict, as_json: bool, table: str) -> None:
    """Print the JSON document or the human table."""
    if as_json:
        json.dump(result, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print(table)
